import { describe, expect, it } from 'vitest';
import { buildEnvelope, INGEST_EVENT_TYPES, parseEvent, type EventParse } from '../../src/domain/event.js';
import { nestsDeeperThan } from '../../src/domain/json-depth.js';

const ACCEPTED_AT_MS = Date.UTC(2024, 4, 1, 12, 30);
const ASSIGNED_ID = 'ffffffff-0000-4000-8000-000000000001';
const EVENT_ID = '3f6c1b2a-9d4e-4c7b-8a1f-2e5d6c7b8a90';
const TASK_ID = '9b2e4c1a-7d3f-4e8a-b6c5-1f0a2d3e4b5c';

const parse = (raw: unknown): EventParse => parseEvent(raw, { acceptedAtMs: ACCEPTED_AT_MS, newId: () => ASSIGNED_ID });

function accepted(raw: unknown) {
  const result = parse(raw);
  if (!result.ok) throw new Error(`expected acceptance, got: ${result.reason}`);
  return result.event;
}

function reasonOf(raw: unknown): string {
  const result = parse(raw);
  if (result.ok) throw new Error('expected a rejection');
  return result.reason;
}

const MACHINE = {
  status: 'available',
  metadata: { machine_id: 'm-0001', geo_location: { country: 'Germany', city: 'Frankfurt' }, cuda_version: '12.4' },
  hardware_specs: {
    cpu: { model: 'AMD EPYC 7763', cores: 64 },
    gpus: [{ id: 'gpu-0', name: 'NVIDIA A100 80GB PCIe', memory: 80 }],
  },
  machine_prices: [{ id: 'p-1', amount: '2.45', currency: 'USD' }],
};
const AGENT = {
  deployment_id: 'dep-42',
  machine_id: 'm-0001',
  status: 'STATUS_RUNNING',
  fail_reason: '',
  metadata: { image: 'vllm:0.6' },
};
const TASK = { task_id: TASK_ID, status: 'failed', fail_reason: 'disk full' };

describe('ingest event schema, per type', () => {
  const valid: Record<(typeof INGEST_EVENT_TYPES)[number], unknown> = {
    EVENT_TYPE_MACHINE_CREATED: { event_type: 'EVENT_TYPE_MACHINE_CREATED', vendor_id: 'v-1', data: MACHINE },
    EVENT_TYPE_MACHINE_UPDATED: {
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      vendor_id: 'v-1',
      data: { ...MACHINE, status: 'unavailable' },
    },
    EVENT_TYPE_MACHINE_REMOVED: {
      event_type: 'EVENT_TYPE_MACHINE_REMOVED',
      vendor_id: 'v-1',
      data: { metadata: { machine_id: 'm-0001' } },
    },
    EVENT_TYPE_DEPLOYMENT_CREATED: {
      event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED',
      vendor_id: 'v-1',
      data: { ...AGENT, status: 'STATUS_PENDING' },
    },
    EVENT_TYPE_DEPLOYMENT_UPDATED: { event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED', vendor_id: 'v-1', data: AGENT },
    EVENT_TYPE_DEPLOYMENT_STOPPED: {
      event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED',
      vendor_id: 'v-1',
      data: { ...AGENT, status: 'STATUS_STOPPED' },
    },
    TASK_UPDATED: { event_type: 'TASK_UPDATED', data: TASK },
  };

  it.each(INGEST_EVENT_TYPES)('accepts a valid %s and keeps its data', (eventType) => {
    const raw = valid[eventType] as { data: unknown };
    const event = accepted(raw);
    expect(event.event_type).toBe(eventType);
    expect(event.data).toEqual(raw.data);
  });

  it.each(INGEST_EVENT_TYPES)('gives an accepted %s every envelope field and nothing else', (eventType) => {
    const raw: { data: unknown; vendor_id?: string; event_id: string; timestamp: string } = {
      ...(valid[eventType] as { data: unknown }),
      event_id: EVENT_ID.toUpperCase(),
      timestamp: '2024-05-01T14:30:00+02:00',
    };
    const event = accepted(raw);
    expect(Object.keys(event).sort()).toEqual(
      [
        'data',
        'event_id',
        'event_type',
        'sentData',
        'timestamp',
        'timestampMs',
        ...('vendor_id' in raw ? ['vendor_id'] : []),
      ].sort(),
    );
    expect(event).toMatchObject({
      event_id: EVENT_ID,
      timestamp: '2024-05-01T12:30:00.000Z',
      timestampMs: ACCEPTED_AT_MS,
      sentData: (raw as { data: unknown }).data,
    });
    if ('vendor_id' in raw) expect(event.vendor_id).toBe(raw.vendor_id);
  });

  it('requires vendor_id for the six webhook event types, and not for TASK_UPDATED', () => {
    for (const eventType of INGEST_EVENT_TYPES.filter((type) => type !== 'TASK_UPDATED')) {
      const { vendor_id: _omitted, ...withoutVendor } = valid[eventType] as { vendor_id: string };
      expect(reasonOf(withoutVendor)).toBe('vendor_id: required');
    }
    expect(accepted({ event_type: 'TASK_UPDATED', data: TASK }).event_type).toBe('TASK_UPDATED');
    expect(accepted({ event_type: 'TASK_UPDATED', vendor_id: 'v-9', data: TASK })).toMatchObject({ vendor_id: 'v-9' });
    expect(reasonOf({ event_type: 'TASK_UPDATED', vendor_id: 'bad vendor', data: TASK })).toMatch(
      /^vendor_id: must be 1-128 characters/,
    );
  });

  it('takes a removal with only metadata.machine_id, or with the full machine', () => {
    expect(accepted(valid.EVENT_TYPE_MACHINE_REMOVED).data).toEqual({ metadata: { machine_id: 'm-0001' } });
    expect(accepted({ event_type: 'EVENT_TYPE_MACHINE_REMOVED', vendor_id: 'v-1', data: MACHINE }).data).toEqual(
      MACHINE,
    );
    expect(reasonOf({ event_type: 'EVENT_TYPE_MACHINE_REMOVED', vendor_id: 'v-1', data: { metadata: {} } })).toBe(
      'data.metadata.machine_id: required',
    );
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_MACHINE_REMOVED',
        vendor_id: 'v-1',
        data: { metadata: { machine_id: 'has space' } },
      }),
    ).toMatch(/^data\.metadata\.machine_id: must be 1-128 characters/);
  });

  it('names the field of each problem', () => {
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor_id: 'v-1',
        data: { status: 'available', metadata: {} },
      }),
    ).toBe('data.metadata.machine_id: required');
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor_id: 'v-1',
        data: { ...MACHINE, hardware_specs: { gpus: [{ memory: -1 }] } },
      }),
    ).toMatch(/^data\.hardware_specs\.gpus\[0\]\.memory: /);
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
        vendor_id: 'v-1',
        data: { ...AGENT, status: 'RUNNING' },
      }),
    ).toMatch(/^data\.status: /);
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
        vendor_id: 'v-1',
        data: { ...AGENT, metadata: { 'odd key': 5 } },
      }),
    ).toMatch(/^data\.metadata\["odd key"\]: /);
    expect(reasonOf({ event_type: 'TASK_UPDATED', data: { ...TASK, task_id: 'nope' } })).toBe(
      'data.task_id: task_id must be a UUID',
    );
    expect(reasonOf({ event_type: 'EVENT_TYPE_MACHINE_CREATED', vendor_id: 'v-1' })).toBe('data: required');
  });

  it('rejects an unknown or missing event_type and anything but an object', () => {
    expect(reasonOf({ event_type: 'EVENT_TYPE_MACHINE_EXPLODED', vendor_id: 'v-1', data: {} })).toMatch(
      /^event_type: must be one of EVENT_TYPE_MACHINE_CREATED, .*TASK_UPDATED$/,
    );
    expect(reasonOf({ vendor_id: 'v-1', data: {} })).toMatch(/^event_type: required: one of /);
    for (const raw of [null, 'event', 42, [valid.TASK_UPDATED]])
      expect(reasonOf(raw)).toBe('the event must be a JSON object');
  });

  it('reports at most three problems and counts the rest', () => {
    const reason = reasonOf({
      event_type: 'TASK_UPDATED',
      event_id: 'x',
      timestamp: 'y',
      data: { task_id: 'z', status: 'done' },
    });
    expect(reason).toBe(
      'event_id: must be a UUID (8-4-4-4-12 hex digits); ' +
        'timestamp: must be an ISO 8601 date-time with a UTC offset, e.g. 2024-05-01T12:00:00Z; ' +
        'data.task_id: task_id must be a UUID (and 2 more)',
    );
  });

  it('rejects unknown top-level fields, naming them', () => {
    expect(reasonOf({ event_type: 'TASK_UPDATED', data: TASK, priority: 'high' })).toBe('unknown field "priority"');
    expect(reasonOf({ event_type: 'EVENT_TYPE_MACHINE_CREATED', vendor_id: 'v-1', vendor: 'v-1', data: MACHINE })).toBe(
      'unknown field "vendor"',
    );
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
        vendor_id: 'v-1',
        data: AGENT,
        machine_id: 'm',
        Data: {},
      }),
    ).toBe('unknown field "machine_id", "Data"');
    expect(parse({ event_id: EVENT_ID, event_type: 'TASK_UPDATED', data: TASK, extra: 1 })).toEqual({
      ok: false,
      reason: 'unknown field "extra"',
      event_id: EVENT_ID,
    });
  });

  it('names unknown fields first, so that the likely cause is never one of those counted in "(and N more)"', () => {
    // `vendor` for `vendor_id`, beside problems in data: the unknown field explains the missing one.
    expect(
      reasonOf({
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor: 'v-1',
        data: { status: 'available', metadata: {}, hardware_specs: 3 },
      }),
    ).toBe('unknown field "vendor"; vendor_id: required; data.metadata.machine_id: required (and 1 more)');
  });

  it('keeps the data exactly as sent beside the parsed form the read models use', () => {
    const sent = { extra: 1, ...TASK, nested: { deep: [1, 'two'] } };
    const event = accepted({ event_type: 'TASK_UPDATED', data: sent });
    expect(event.sentData).toBe(sent);
    expect(event.data).toEqual(TASK);
    const agentSent = { deployment_id: 'd', machine_id: 'm', status: 'STATUS_PENDING' };
    const agent = accepted({ event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED', vendor_id: 'v-1', data: agentSent });
    expect(agent.sentData).toEqual({ deployment_id: 'd', machine_id: 'm', status: 'STATUS_PENDING' });
    expect(agent.data).toEqual({ ...agentSent, fail_reason: '', metadata: {} });
  });
});

describe('nesting', () => {
  /** `levels` levels of arrays within one another, as parsed JSON: `[[…[1]…]]`. */
  const nested = (levels: number): unknown => JSON.parse(`${'['.repeat(levels)}1${']'.repeat(levels)}`);
  const machineWith = (extra: unknown) => ({
    event_id: EVENT_ID,
    event_type: 'EVENT_TYPE_MACHINE_CREATED',
    vendor_id: 'v-1',
    data: { ...MACHINE, extra },
  });

  it('takes data nested 64 levels deep and rejects 65, naming the limit and echoing the id', () => {
    // data is level 1, so its field holds the other 63 (then 64).
    expect(accepted(machineWith(nested(63))).event_id).toBe(EVENT_ID);
    expect(parse(machineWith(nested(64)))).toEqual({
      ok: false,
      reason: 'data: nested more than 64 levels deep (objects and arrays within one another)',
      event_id: EVENT_ID,
    });
  });

  it('rejects a poison event nested 20,000 (40 KB) and 2,000,000 levels deep, or holding a cycle, without overflowing the stack', () => {
    for (const levels of [20_000, 2_000_000])
      expect(reasonOf(machineWith(nested(levels)))).toMatch(/^data: nested more than 64 levels deep/);
    const cycle: Record<string, unknown> = { name: 'loop' };
    cycle.self = cycle;
    expect(reasonOf(machineWith(cycle))).toMatch(/^data: nested more than 64 levels deep/);
  });
});

describe('nestsDeeperThan', () => {
  it('counts the value itself as level 1 and every object or array within as one more', () => {
    const cases: [unknown, number, boolean][] = [
      [null, 0, false],
      ['text', 0, false],
      [{}, 1, false],
      [{}, 0, true],
      [{ a: [] }, 2, false],
      [{ a: [] }, 1, true],
      [[1, 'x', null, [2, { b: {} }]], 4, false],
      [[1, 'x', null, [2, { b: {} }]], 3, true],
    ];
    for (const [value, levelsMax, deeper] of cases)
      expect(nestsDeeperThan(value, levelsMax), JSON.stringify([value, levelsMax])).toBe(deeper);
  });
});

describe('event id and time', () => {
  it('assigns an id when absent and lower-cases a given one', () => {
    expect(accepted(valid()).event_id).toBe(ASSIGNED_ID);
    expect(accepted(valid({ event_id: EVENT_ID.toUpperCase() })).event_id).toBe(EVENT_ID);
  });

  it('rejects an event_id that is not a UUID, and echoes a valid id on rejection', () => {
    expect(reasonOf(valid({ event_id: 'evt-1' }))).toBe('event_id: must be a UUID (8-4-4-4-12 hex digits)');
    expect(parse({ event_id: EVENT_ID, event_type: 'TASK_UPDATED', data: {} })).toMatchObject({
      ok: false,
      event_id: EVENT_ID,
    });
  });

  it('normalises the timestamp to UTC with milliseconds and defaults it to the acceptance time', () => {
    expect(accepted(valid({ timestamp: '2024-05-01T14:00:00+02:00' }))).toMatchObject({
      timestamp: '2024-05-01T12:00:00.000Z',
      timestampMs: Date.UTC(2024, 4, 1, 12),
    });
    expect(accepted(valid({ timestamp: '2024-05-01T12:00:00.123456Z' })).timestamp).toBe('2024-05-01T12:00:00.123Z');
    expect(accepted(valid())).toMatchObject({ timestamp: '2024-05-01T12:30:00.000Z', timestampMs: ACCEPTED_AT_MS });
  });

  it('requires an offset and a real date', () => {
    for (const timestamp of [
      '2024-05-01T12:00:00',
      '2024-05-01',
      '2024-02-30T00:00:00Z',
      '2024-05-01T12:00:00+0200',
      1714564800000,
    ]) {
      expect(reasonOf(valid({ timestamp }))).toBe(
        'timestamp: must be an ISO 8601 date-time with a UTC offset, e.g. 2024-05-01T12:00:00Z',
      );
    }
  });

  function valid(extra: Record<string, unknown> = {}) {
    return { event_type: 'TASK_UPDATED', data: TASK, ...extra };
  }
});

describe('buildEnvelope', () => {
  it('produces the exact body vendors receive', () => {
    const body = buildEnvelope({
      event_id: EVENT_ID,
      event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED',
      timestamp: '2024-05-01T14:00:00.5+02:00',
      data: { deployment_id: 'dep-42', machine_id: 'm-0001', status: 'STATUS_STOPPED', fail_reason: '', metadata: {} },
    });
    expect(body).toBe(
      '{"version":"1.0","event_id":"3f6c1b2a-9d4e-4c7b-8a1f-2e5d6c7b8a90","event_type":"EVENT_TYPE_DEPLOYMENT_STOPPED",' +
        '"timestamp":"2024-05-01T12:00:00.500Z",' +
        '"data":{"deployment_id":"dep-42","machine_id":"m-0001","status":"STATUS_STOPPED","fail_reason":"","metadata":{}}}',
    );
  });

  it('envelopes a parsed event with its data as the producer sent it: no defaults added, nothing dropped', () => {
    const event = accepted({
      event_id: EVENT_ID,
      event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED',
      vendor_id: 'v-1',
      data: { status: 'STATUS_PENDING', deployment_id: 'd', machine_id: 'm', region: { name: 'eu', zones: [1, 2] } },
    });
    if (event.event_type === 'TASK_UPDATED') throw new Error('unexpected type');
    expect(buildEnvelope({ ...event, data: event.sentData })).toBe(
      `{"version":"1.0","event_id":"${EVENT_ID}","event_type":"EVENT_TYPE_DEPLOYMENT_CREATED","timestamp":"2024-05-01T12:30:00.000Z",` +
        '"data":{"status":"STATUS_PENDING","deployment_id":"d","machine_id":"m","region":{"name":"eu","zones":[1,2]}}}',
    );
  });

  it('refuses a timestamp that is not a date', () => {
    expect(() =>
      buildEnvelope({ event_id: EVENT_ID, event_type: 'EVENT_TYPE_MACHINE_REMOVED', timestamp: 'yesterday', data: {} }),
    ).toThrow(RangeError);
  });
});
