import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisEventDedupe } from '../../src/store/event-dedupe.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';

const HOUR_MS = 3_600_000;
const WINDOW_MS = 48 * HOUR_MS;
/** A bucket boundary (buckets are half a window long), so tests can place marks at either end of one. */
const T0 = Math.ceil(Date.now() / (WINDOW_MS / 2)) * (WINDOW_MS / 2);

const ids = (count: number) => Array.from({ length: count }, () => randomUUID());

/** Every key of the prefix's dedupe partitions and the bytes Redis reports for them (MEMORY USAGE). */
async function dedupeFootprint(
  t: TestRedis,
): Promise<{ keys: number; bytes: number; encodings: Record<string, number> }> {
  let cursor = '0';
  let keys = 0;
  let bytes = 0;
  const encodings: Record<string, number> = {};
  do {
    const [next, batch] = await t.redis.scan(cursor, 'MATCH', `{${t.prefix}:dd*`, 'COUNT', 1000);
    for (const key of batch) {
      keys += 1;
      bytes += (await t.redis.memory('USAGE', key, 'SAMPLES', 0)) ?? 0;
      const encoding = String(await t.redis.object('ENCODING', key));
      encodings[encoding] = (encodings[encoding] ?? 0) + 1;
    }
    cursor = next;
  } while (cursor !== '0');
  return { keys, bytes, encodings };
}

describe('compact event-id dedupe marks', () => {
  let t: TestRedis | undefined;
  afterEach(async () => {
    await t?.cleanup();
    t = undefined;
  });

  it('sees what was marked, in the order asked, and nothing else', async () => {
    t = testRedis();
    const dedupe = new RedisEventDedupe(t.redis, t.prefix, { windowMs: WINDOW_MS });
    const marked = ids(300);
    const others = ids(300);
    expect(await dedupe.seen(marked, T0)).toEqual(marked.map(() => false));
    await dedupe.mark(marked, T0);
    const mixed = marked.flatMap((id, i) => [id, others[i]!]);
    expect(await dedupe.seen(mixed, T0 + 1)).toEqual(mixed.map((_, i) => i % 2 === 0));
    expect(await dedupe.seen([], T0)).toEqual([]);
    await dedupe.mark([], T0);
  });

  it('keeps a mark for the whole window from either end of its bucket, and forgets it after a window and a half at most', async () => {
    t = testRedis();
    const dedupe = new RedisEventDedupe(t.redis, t.prefix, { windowMs: WINDOW_MS });
    const bucketMs = WINDOW_MS / 2;
    const early = ids(20);
    const late = ids(20);
    await dedupe.mark(early, T0);
    await dedupe.mark(late, T0 + bucketMs - 1);
    // Seen for a whole window after each was marked.
    expect(await dedupe.seen(early, T0 + WINDOW_MS - 1)).toEqual(early.map(() => true));
    expect(await dedupe.seen(late, T0 + bucketMs - 1 + WINDOW_MS)).toEqual(late.map(() => true));
    // Gone once the window has passed the end of their bucket.
    expect(await dedupe.seen([...early, ...late], T0 + bucketMs + WINDOW_MS)).toEqual(
      [...early, ...late].map(() => false),
    );
    // The sets expire on their own at that time (plus a minute's slack for clocks): Redis reclaims them.
    // Their TTL is counted from the mark (the early marks' sets were written at T0).
    let cursor = '0';
    const ttls: number[] = [];
    do {
      const [next, batch] = await t.redis.scan(cursor, 'MATCH', `{${t.prefix}:dd*`, 'COUNT', 1000);
      for (const key of batch) if (!key.endsWith(':meta')) ttls.push(await t.redis.pttl(key));
      cursor = next;
    } while (cursor !== '0');
    expect(ttls.length).toBeGreaterThan(0);
    for (const ttl of ttls) {
      expect(ttl).toBeLessThanOrEqual(bucketMs + WINDOW_MS + 60_000);
      expect(ttl).toBeGreaterThan(WINDOW_MS + 60_000 - 5_000);
    }
  });

  it('grows generations of sets as marks arrive, and sizes the next bucket from this one', async () => {
    t = testRedis();
    const dedupe = new RedisEventDedupe(t.redis, t.prefix, { windowMs: WINDOW_MS, setTarget: 4 });
    const marked = ids(3_000);
    for (let i = 0; i < marked.length; i += 500) await dedupe.mark(marked.slice(i, i + 500), T0);
    const others = ids(3_000);
    expect((await dedupe.seen(marked, T0 + 1)).every(Boolean)).toBe(true);
    expect((await dedupe.seen(others, T0 + 1)).some(Boolean)).toBe(false);
    const metas = await Promise.all(
      Array.from({ length: 16 }, (_, p) => p).map(async (p) => t!.redis.hgetall(await metaKey(t!, p))),
    );
    const bucket = T0 / (WINDOW_MS / 2);
    const generations = metas.map((m) => Number(m[`g${bucket}`] ?? 0));
    console.log(`dedupe generations per partition after 3,000 marks at 4 per set: ${generations.join(' ')}`);
    // About 190 marks per partition at 4 per set: generations of 1, 2, 4, … sets hold 4, 8, 16, …
    for (const g of generations) expect(g).toBeGreaterThanOrEqual(4);
    // The next bucket starts with enough sets for as many marks (a quarter more), in one generation.
    await dedupe.mark(ids(16), T0 + WINDOW_MS / 2);
    const next = await Promise.all(
      Array.from({ length: 16 }, (_, p) => p).map(async (p) => t!.redis.hgetall(await metaKey(t!, p))),
    );
    for (const [p, meta] of next.entries()) {
      const previous = Number(metas[p]![`n${bucket}`] ?? 0);
      const first = Number(meta[`s${bucket + 1}`] ?? 0);
      if (first === 0) continue;
      // The fewest sets (a power of two) that hold a quarter more than the previous bucket's marks.
      expect(first * 4).toBeGreaterThanOrEqual(previous * 1.25);
      expect((first / 2) * 4).toBeLessThan(previous * 1.25);
    }
    // Marks of the earlier bucket are still seen beside the new one.
    expect((await dedupe.seen(marked.slice(0, 100), T0 + WINDOW_MS / 2 + 1)).every(Boolean)).toBe(true);
  });

  it('takes no distinct id for a marked one, and costs well under 40 bytes per mark', async () => {
    t = testRedis();
    const dedupe = new RedisEventDedupe(t.redis, t.prefix, { windowMs: WINDOW_MS });
    const MARKS = 200_000;
    // In two buckets, as a steady rate would leave them: the second sized from the first.
    const marked = ids(MARKS);
    for (let i = 0; i < MARKS; i += 1_000)
      await dedupe.mark(marked.slice(i, i + 1_000), i < MARKS / 2 ? T0 : T0 + WINDOW_MS / 2);
    let falseDuplicates = 0;
    for (let i = 0; i < MARKS; i += 1_000)
      falseDuplicates += (await dedupe.seen(ids(1_000), T0 + WINDOW_MS / 2 + 1)).filter(Boolean).length;
    const missed = (await dedupe.seen(marked, T0 + WINDOW_MS / 2 + 1)).filter((seen) => !seen).length;
    const footprint = await dedupeFootprint(t);
    const perMark = footprint.bytes / MARKS;
    console.log(
      `dedupe: ${MARKS} marks in ${footprint.keys} keys (${JSON.stringify(footprint.encodings)}), ${footprint.bytes} B = ${perMark.toFixed(1)} B per mark; ` +
        `${MARKS} distinct ids looked up: ${falseDuplicates} taken for duplicates; marked ids missed: ${missed}`,
    );
    expect(missed).toBe(0);
    expect(falseDuplicates).toBe(0);
    expect(perMark).toBeLessThanOrEqual(40);
  });
});

/** The meta hash key of dedupe partition `p` (found by scanning: the tags are spread, not named by number alone). */
async function metaKey(t: TestRedis, p: number): Promise<string> {
  let cursor = '0';
  do {
    const [next, batch] = await t.redis.scan(cursor, 'MATCH', `{${t.prefix}:dd${p}.*}:meta`, 'COUNT', 1000);
    if (batch[0] !== undefined) return batch[0];
    cursor = next;
  } while (cursor !== '0');
  return `{${t.prefix}:dd${p}.none}:meta`;
}
