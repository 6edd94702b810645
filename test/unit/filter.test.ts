import { describe, expect, it } from 'vitest';
import { compileFilter, explainFilter, FILTER_LIMITS, parseFilter, type FilterNode } from '../../src/domain/filter.js';

const event = {
  version: '1',
  event_id: 'evt-1',
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  timestamp: '2026-11-24T10:00:00.000Z',
  data: {
    status: 'unavailable',
    price: 1.25,
    gpus: [{ model: 'H100', memory_gb: 80 }],
    region: null,
    tags: { tier: 'gold' },
    count: '3',
  },
};

function matches(filter: unknown): boolean {
  const parsed = parseFilter(filter);
  if (!parsed.ok) throw new Error(parsed.problem);
  const compiled = compileFilter(parsed.filter)(event);
  // The dry run must agree with the compiled filter on every case.
  expect(explainFilter(parsed.filter, event).matched).toBe(compiled);
  return compiled;
}

function problemOf(filter: unknown): string {
  const parsed = parseFilter(filter);
  if (parsed.ok) throw new Error(`accepted: ${JSON.stringify(filter)}`);
  return parsed.problem;
}

describe('payload filters', () => {
  it('eq and ne compare strictly, with no type coercion', () => {
    expect(matches({ path: 'data.status', eq: 'unavailable' })).toBe(true);
    expect(matches({ path: 'data.status', eq: 'available' })).toBe(false);
    expect(matches({ path: 'data.count', eq: 3 })).toBe(false);
    expect(matches({ path: 'data.count', eq: '3' })).toBe(true);
    expect(matches({ path: 'data.region', eq: null })).toBe(true);
    expect(matches({ path: 'data.status', ne: 'available' })).toBe(true);
    expect(matches({ path: 'data.nothing', ne: 'x' })).toBe(true);
    expect(matches({ path: 'event_type', eq: 'EVENT_TYPE_MACHINE_UPDATED' })).toBe(true);
  });

  it('in, numeric comparisons (numbers only) and exists', () => {
    expect(matches({ path: 'data.gpus.0.model', in: ['A100', 'H100'] })).toBe(true);
    expect(matches({ path: 'data.gpus.0.model', in: ['A100'] })).toBe(false);
    expect(matches({ path: 'data.gpus.1.model', in: ['H100'] })).toBe(false);
    expect(matches({ path: 'data.price', gt: 1 })).toBe(true);
    expect(matches({ path: 'data.price', gte: 1.25 })).toBe(true);
    expect(matches({ path: 'data.price', lt: 1.25 })).toBe(false);
    expect(matches({ path: 'data.price', lte: 1.25 })).toBe(true);
    expect(matches({ path: 'data.count', gt: 1 })).toBe(false);
    expect(matches({ path: 'data.gpus.0.memory_gb', gte: 80 })).toBe(true);
    expect(matches({ path: 'data.region', exists: true })).toBe(true);
    expect(matches({ path: 'data.zone', exists: true })).toBe(false);
    expect(matches({ path: 'data.zone', exists: false })).toBe(true);
    // A key on a string or a name on a list leads nowhere.
    expect(matches({ path: 'data.status.length', exists: true })).toBe(false);
    expect(matches({ path: 'data.gpus.length', exists: true })).toBe(false);
    // Inherited properties are not fields of the event.
    expect(matches({ path: 'data.tags.constructor', exists: true })).toBe(false);
    expect(matches({ path: 'data.__proto__', exists: true })).toBe(false);
  });

  it('and, or, not nest', () => {
    const filter: FilterNode = {
      and: [
        { path: 'data.status', eq: 'unavailable' },
        { or: [{ path: 'data.tags.tier', eq: 'gold' }, { not: { path: 'data.price', lt: 2 } }] },
      ],
    };
    expect(matches(filter)).toBe(true);
    expect(matches({ not: filter })).toBe(false);
    expect(
      matches({
        or: [
          { path: 'data.zone', exists: true },
          { path: 'data.price', gt: 5 },
        ],
      }),
    ).toBe(false);
  });

  it('explains a dry run node by node, with the value found', () => {
    const parsed = parseFilter({
      and: [
        { path: 'data.status', eq: 'available' },
        { path: 'data.zone', exists: true },
        { path: 'data.tags', eq: 'x' },
      ],
    });
    if (!parsed.ok) throw new Error(parsed.problem);
    expect(explainFilter(parsed.filter, event)).toEqual({
      matched: false,
      test: 'all of 3',
      parts: [
        { matched: false, test: 'data.status == "available"', foundKind: 'value', found: 'unavailable' },
        { matched: false, test: 'data.zone exists true', foundKind: 'missing' },
        { matched: false, test: 'data.tags == "x"', foundKind: 'object' },
      ],
    });
  });

  it('refuses bad filters with a problem that names the bad part', () => {
    expect(problemOf('data.status == "x"')).toMatch(/^filter: must be an object/);
    expect(problemOf({ path: 'status', eq: 'x' })).toBe(
      'filter.path: must start with data, event_type, event_id, timestamp or version (got "status")',
    );
    expect(
      problemOf({
        and: [
          { path: 'data.a', eq: 1 },
          { path: 'data.b', eq: [1] },
        ],
      }),
    ).toBe('filter.and[1].eq: must be a string, number, boolean or null (not a list or object)');
    expect(problemOf({ path: 'data.a', eq: 1, ne: 2 })).toMatch(/^filter: needs exactly one comparison/);
    expect(problemOf({ path: 'data.a', like: 'x' })).toMatch(/^filter: unknown field "like"/);
    expect(problemOf({ path: 'data.a', gt: '5' })).toBe('filter.gt: must be a number');
    expect(problemOf({ path: 'data.a', exists: 'yes' })).toBe('filter.exists: must be true or false');
    expect(problemOf({ path: 'data.a', in: [] })).toBe(
      `filter.in: must be a list of 1 to ${FILTER_LIMITS.inValues} values`,
    );
    expect(problemOf({ and: [] })).toBe(`filter.and: must be a list of 1 to ${FILTER_LIMITS.branches} filters`);
    expect(problemOf({ and: [{ path: 'data.a', eq: 1 }], or: [] })).toMatch(/^filter: "and" stands alone/);
    expect(problemOf({ not: { path: 'data.a b', eq: 1 } })).toMatch(/^filter\.not\.path: "a b" is not a key/);
    expect(problemOf({ path: 'event_type.x', eq: 1 })).toBe('filter.path: only data has fields below it');
  });

  it('keeps filters small: depth, nodes, list and string lengths, bytes', () => {
    let deep: unknown = { path: 'data.a', eq: 1 };
    for (let i = 0; i < FILTER_LIMITS.depth; i += 1) deep = { not: deep };
    expect(problemOf(deep)).toMatch(/nested too deep/);
    const wide = {
      or: Array.from({ length: 20 }, () => ({
        and: [
          { path: 'data.a', eq: 1 },
          { path: 'data.b', eq: 2 },
        ],
      })),
    };
    expect(problemOf(wide)).toMatch(/too many nodes/);
    expect(problemOf({ path: 'data.a', in: Array.from({ length: 101 }, (_, i) => i) })).toMatch(/list of 1 to 100/);
    expect(problemOf({ path: 'data.a', eq: 'x'.repeat(257) })).toMatch(/at most 256 characters/);
    expect(problemOf({ path: 'data.a.b.c.d.e.f.g.h', eq: 1 })).toMatch(/at most 8 segments/);
    expect(problemOf({ path: 'data.a', in: Array.from({ length: 100 }, () => 'y'.repeat(50)) })).toMatch(
      /at most 4096 bytes/,
    );
  });

  it('a compiled 10-node filter checks 200,000 events alike (its cost per event is printed; the bench measures ingest with filters)', () => {
    const parsed = parseFilter({
      and: [
        { path: 'event_type', eq: 'EVENT_TYPE_MACHINE_UPDATED' },
        {
          or: [
            { path: 'data.status', in: ['unavailable', 'maintenance'] },
            { path: 'data.price', gt: 3 },
          ],
        },
        { not: { path: 'data.zone', exists: true } },
        { path: 'data.gpus.0.model', eq: 'H100' },
      ],
    });
    if (!parsed.ok) throw new Error(parsed.problem);
    const check = compileFilter(parsed.filter);
    let hits = 0;
    const N = 200_000;
    const started = performance.now();
    for (let i = 0; i < N; i += 1) if (check(event)) hits += 1;
    const perEventUs = ((performance.now() - started) * 1_000) / N;
    console.log(`10-node filter: ${perEventUs.toFixed(3)} µs per event`);
    expect(hits).toBe(N);
  });
});
