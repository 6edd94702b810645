import { afterEach, describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import {
  appendBatch,
  FIRST_ATTEMPTS_GROUP,
  FirstAttemptReader,
  streamCounts,
  type FirstAttemptBatch,
} from '../../src/delivery/first-attempts.js';
import { deliveryIdFor } from '../../src/domain/ids.js';
import { BATCH_MAX } from '../../src/delivery/jobs.js';
import { StorageUnavailableError } from '../../src/delivery/signals.js';
import { RedisEventLog } from '../../src/store/event-log.js';
import { redisKeys } from '../../src/store/keys.js';
import { ensureGroup } from '../../src/store/stream-reads.js';
import { capturedLogs } from '../helpers/logs.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { quiescent, waitFor } from '../helpers/wait.js';

const DAY_MS = 24 * 3_600_000;

function delivery(n: number): DeliverJob {
  const eventId = `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
  return {
    deliveryId: deliveryIdFor(eventId, 'wh-1'),
    eventId,
    eventType: 'EVENT_TYPE_MACHINE_CREATED',
    vendorId: 'v-1',
    webhookId: 'wh-1',
    body: JSON.stringify({ n }),
    acceptedAtMs: 1_000 + n,
  };
}

describe('first-attempt streams (real Redis)', () => {
  let r: TestRedis;
  const readers: FirstAttemptReader[] = [];

  afterEach(async () => {
    await Promise.all(readers.splice(0).map((reader) => reader.stop()));
    await r.cleanup();
  });

  function reader(
    run: (batch: FirstAttemptBatch) => Promise<unknown>,
    overrides: { claimMinIdleMs?: number; inFlightMax?: number; consumer?: string } = {},
  ) {
    const keys = redisKeys(r.prefix);
    const logs = capturedLogs();
    const created = new FirstAttemptReader({
      redis: r.redis,
      partition: 0,
      stream: keys.firstAttempts.streamOf(0),
      failedStream: keys.firstAttempts.failedOf(0),
      run,
      loggedBodies: (refs) => new RedisEventLog(r.redis, keys, DAY_MS).bodiesOf(refs),
      inFlightMax: overrides.inFlightMax ?? 2,
      claimMinIdleMs: overrides.claimMinIdleMs ?? 30_000,
      logger: logs.logger(),
      blockMs: 200,
      retryBaseMs: 20,
      retryMaxMs: 50,
      ...(overrides.consumer ? { consumer: overrides.consumer } : {}),
    });
    readers.push(created);
    /** What the reader logged so far: its level and message. */
    const lines = () =>
      logs.lines.map((line) => ({
        level: { 30: 'info', 40: 'warn', 50: 'error' }[line.level as number],
        message: line.msg,
      }));
    return { reader: created, lines };
  }

  const stream = () => redisKeys(r.prefix).firstAttempts.streamOf(0);

  it('runs each batch once, appended before or after it started, and deletes its entry when done', async () => {
    r = testRedis();
    await appendBatch(r.redis, stream(), [delivery(1), delivery(2)]);
    const runs: FirstAttemptBatch[] = [];
    const { reader: started } = reader(async (batch) => void runs.push(batch));
    await started.start();
    await appendBatch(r.redis, stream(), [delivery(3)]);
    await waitFor(() => runs.length >= 2, 5_000, 'both batches');
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'the entries deleted');
    expect(runs.map((b) => b.deliveries.map((d) => d.eventId.slice(-1)))).toEqual([['1', '2'], ['3']]);
    expect(runs.every((b) => !b.rerun && b.id.startsWith('s0-'))).toBe(true);
    expect(await streamCounts(r.redis, stream())).toEqual({ waiting: 0, active: 0 });
    // Nothing runs twice.
    await quiescent(() => runs.length, 600);
    expect(runs).toHaveLength(2);
  });

  it('runs a failed batch again as a re-run under the same id until it succeeds', async () => {
    r = testRedis();
    await appendBatch(r.redis, stream(), [delivery(1)]);
    const runs: FirstAttemptBatch[] = [];
    const { reader: started, lines } = reader(async (batch) => {
      runs.push(batch);
      if (runs.length === 1) throw new StorageUnavailableError();
      if (runs.length === 2) throw new Error('an unexpected error');
    });
    await started.start();
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'the entry finished');
    expect(runs.map((b) => b.rerun)).toEqual([false, true, true]);
    expect(new Set(runs.map((b) => b.id)).size).toBe(1);
    // A storage outage is logged once by the connection watcher, not per batch; the unexpected error is logged.
    expect(
      lines()
        .filter((l) => l.level === 'warn')
        .map((l) => l.message),
    ).toEqual(['first attempts: batch failed; it runs again']);
  });

  it('claims a batch read by a worker that died, and re-runs it', async () => {
    r = testRedis();
    await ensureGroup(r.redis, stream(), FIRST_ATTEMPTS_GROUP);
    await appendBatch(r.redis, stream(), [delivery(1)]);
    // A worker that read the entry and died before finishing it.
    const taken = await r.redis.xreadgroup(
      'GROUP',
      FIRST_ATTEMPTS_GROUP,
      'dead-worker',
      'COUNT',
      10,
      'STREAMS',
      stream(),
      '>',
    );
    expect(taken).not.toBeNull();
    const runs: FirstAttemptBatch[] = [];
    const { reader: started, lines } = reader(async (batch) => void runs.push(batch), { claimMinIdleMs: 300 });
    await started.start();
    await waitFor(() => runs.length === 1, 5_000, 'the claimed batch');
    expect(runs[0]!.rerun).toBe(true);
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'the entry finished');
    expect(lines().some((l) => l.message === 'first attempts: claimed batches of a worker that stopped')).toBe(true);
  });

  it('keeps a batch that runs longer than the claim time its own: a second worker does not run it too', async () => {
    r = testRedis();
    await appendBatch(r.redis, stream(), [delivery(1)]);
    let runs = 0;
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const slow = async () => {
      runs += 1;
      await released;
    };
    try {
      const { reader: first } = reader(slow, { claimMinIdleMs: 300, consumer: 'first' });
      await first.start();
      await waitFor(() => runs === 1, 5_000, 'the first worker running the batch');
      const { reader: second } = reader(slow, { claimMinIdleMs: 300, consumer: 'second' });
      await second.start();
      // Four claim times: the first worker renews its claim every 100 ms, so the second never takes it.
      await quiescent(() => runs, 1_200);
      expect(runs).toBe(1);
    } finally {
      release();
    }
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'the entry finished');
  });

  it('reads the bodies of an entry that refers to the event log from there, and flags the ones the log no longer holds', async () => {
    r = testRedis();
    const keys = redisKeys(r.prefix);
    const log = new RedisEventLog(r.redis, keys, DAY_MS);
    const [kept, erased, inline] = [delivery(1), delivery(2), delivery(3)];
    const other = { ...delivery(4), webhookId: 'wh-2' };
    await log.append([kept, erased, other].map((d) => ({ ...d })));
    await log.erase('wh-1', [erased.deliveryId]);
    await appendBatch(r.redis, stream(), [kept, erased, other], true);
    await appendBatch(r.redis, stream(), [inline]);
    // The referring entry holds no body: the body went to Redis once, with the log.
    const [[, fields]] = (await r.redis.xrange(stream(), '-', '+', 'COUNT', 1)) as [[string, string[]]];
    expect(fields.filter((_, i) => i % 2 === 0)).toEqual(['l', 'l', 'l']);
    expect(fields.some((value) => value.includes('"n":'))).toBe(false);

    const runs: FirstAttemptBatch[] = [];
    const { reader: started } = reader(async (batch) => void runs.push(batch));
    await started.start();
    await waitFor(() => runs.length === 2, 5_000, 'both batches');
    // Two at once: the one that reads its bodies first may end second.
    const referring = runs.find((b) => b.deliveries.length === 3)!;
    const carrying = runs.find((b) => b.deliveries.length === 1)!;
    expect(referring.deliveries.map((d) => d.body)).toEqual([kept.body, '', other.body]);
    expect([...(referring.gone ?? [])].map((d) => d.deliveryId)).toEqual([erased.deliveryId]);
    expect(referring.deliveries.map(({ body: _body, ...d }) => d)).toEqual(
      [kept, erased, other].map(({ body: _body, ...d }) => d),
    );
    expect(carrying.deliveries).toEqual([inline]);
    expect(carrying.gone).toBeUndefined();
  });

  it('sets an entry aside that refers to the log but carries a body, or is not an object', async () => {
    r = testRedis();
    const keys = redisKeys(r.prefix);
    const { body: _body, ...bare } = delivery(1);
    await r.redis.xadd(stream(), '*', 'l', JSON.stringify({ ...bare, body: 'x' }));
    await r.redis.xadd(stream(), '*', 'l', '"text"');
    await appendBatch(r.redis, stream(), [delivery(2)]);
    const runs: FirstAttemptBatch[] = [];
    const { reader: started } = reader(async (batch) => void runs.push(batch));
    await started.start();
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'every entry finished or set aside');
    expect(runs.map((b) => b.deliveries.map((d) => d.eventId.slice(-1)))).toEqual([['2']]);
    const failed = await r.redis.xrange(keys.firstAttempts.failedOf(0), '-', '+');
    expect(failed.map(([, f]) => f[f.indexOf('reason') + 1])).toEqual([
      'delivery 1: the "l" field holds a body or is not an object',
      'delivery 1: the "l" field holds a body or is not an object',
    ]);
  });

  it('runs an entry an older worker set aside for a field it did not know, once however many workers look, and leaves unreadable ones', async () => {
    r = testRedis();
    const keys = redisKeys(r.prefix);
    const failed = keys.firstAttempts.failedOf(0);
    const d = delivery(1);
    await new RedisEventLog(r.redis, keys, DAY_MS).append([{ ...d }]);
    const { body: _body, ...bare } = d;
    // As an older version sets aside an entry that refers to the event log for its bodies.
    const aside = (reason: string, ...fields: string[]) =>
      r.redis.xadd(failed, '*', 'reason', reason, 'failed_at', new Date().toISOString(), 'entry_id', '1-1', ...fields);
    await aside('an unknown field "l"', 'l', JSON.stringify(bare));
    await aside('delivery 1: the "d" field is not valid JSON', 'd', '[ not json', 'p', '{}');
    await ensureGroup(r.redis, stream(), FIRST_ATTEMPTS_GROUP);

    const runs: FirstAttemptBatch[] = [];
    const first = reader(async (batch) => void runs.push(batch), { consumer: 'a' });
    const second = reader(async (batch) => void runs.push(batch), { consumer: 'b' });
    await Promise.all([first.reader.start(), second.reader.start()]);
    await waitFor(() => runs.length >= 1, 5_000, 'the set-aside entry run');
    expect(runs[0]!.deliveries).toEqual([d]);
    expect(runs[0]!.gone).toBeUndefined();
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'the entry done');
    // Once, though both workers looked; the unreadable one stays with its reason.
    await quiescent(() => runs.length, 600);
    expect(runs).toHaveLength(1);
    const left = await r.redis.xrange(failed, '-', '+');
    expect(left.map(([, f]) => f[1])).toEqual(['delivery 1: the "d" field is not valid JSON']);
    expect(
      [...first.lines(), ...second.lines()].filter((l) =>
        String(l.message).includes('set aside elsewhere is readable here'),
      ),
    ).toHaveLength(1);
  });

  it('runs small batches several at once where full ones run one at a time: a trickle of events does not wait on batch places', async () => {
    r = testRedis();
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const running: number[] = [];
    let now = 0;
    const { reader: started } = reader(
      async (batch) => {
        now += 1;
        running.push(now);
        await released;
        now -= 1;
        return batch;
      },
      { inFlightMax: 1 },
    );
    // Six entries of one delivery: up to 4 × inFlightMax at once.
    for (let n = 1; n <= 6; n += 1) await appendBatch(r.redis, stream(), [delivery(n)]);
    await started.start();
    await waitFor(() => now === 4, 5_000, 'four small batches at once');
    await quiescent(() => running.length, 300);
    expect(Math.max(...running)).toBe(4);
    release();
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'every entry done');
    await started.stop();

    // Full batches: one at a time (their deliveries fill inFlightMax's room).
    const full = (from: number) => Array.from({ length: BATCH_MAX }, (_, i) => delivery(from + i));
    let gate: () => void = () => undefined;
    let fullNow = 0;
    let fullMax = 0;
    let fullRuns = 0;
    const { reader: second } = reader(
      async () => {
        fullNow += 1;
        fullRuns += 1;
        fullMax = Math.max(fullMax, fullNow);
        await new Promise<void>((resolve) => (gate = resolve));
        fullNow -= 1;
      },
      { inFlightMax: 1, consumer: 'full' },
    );
    await appendBatch(r.redis, stream(), full(1_000));
    await appendBatch(r.redis, stream(), full(2_000));
    await second.start();
    await waitFor(() => fullRuns === 1, 5_000, 'the first full batch');
    await quiescent(() => fullRuns, 300);
    expect(fullMax).toBe(1);
    gate();
    await waitFor(() => fullRuns === 2, 5_000, 'the second full batch, after the first');
    gate();
    expect(fullMax).toBe(1);
  });

  it('sets an entry without a readable batch aside with its reason, and goes on with the next', async () => {
    r = testRedis();
    const keys = redisKeys(r.prefix);
    await r.redis.xadd(stream(), '*', 'd', '{"deliveryId": [ not json', 'p', '{}');
    await r.redis.xadd(stream(), '*', 'other', 'field');
    await r.redis.xadd(stream(), '*', 'p', '{}');
    await r.redis.xadd(stream(), '*', 'd', '{"deliveryId": "x"}', 'p', '{}');
    await appendBatch(r.redis, stream(), [delivery(1)]);
    const runs: FirstAttemptBatch[] = [];
    const { reader: started, lines } = reader(async (batch) => void runs.push(batch));
    await started.start();
    await waitFor(() => runs.length === 1, 5_000, 'the readable batch');
    await waitFor(async () => (await r.redis.xlen(stream())) === 0, 5_000, 'every entry finished or set aside');
    const failed = await r.redis.xrange(keys.firstAttempts.failedOf(0), '-', '+');
    const reasons = failed.map(([, fields]) => fields[fields.indexOf('reason') + 1]);
    expect(reasons).toEqual([
      'delivery 1: the "d" field is not valid JSON',
      'an unknown field "other"',
      'delivery 0: a "p" field without its "d" field before it',
      'the batch is not valid: deliveries.0.eventId: Invalid input: expected string, received undefined',
    ]);
    // The entry's fields are kept as they were, for an operator to look at.
    expect(failed[0]![1].slice(-4)).toEqual(['d', '{"deliveryId": [ not json', 'p', '{}']);
    expect(lines().filter((l) => l.level === 'error')).toHaveLength(4);
  });

  it('stops at once while it waits for entries, and leaves a batch waiting to run again pending for another worker', async () => {
    r = testRedis();
    const { reader: idle } = reader(async () => undefined);
    await idle.start();
    const stoppedAt = Date.now();
    await idle.stop();
    expect(Date.now() - stoppedAt).toBeLessThan(1_000);

    await appendBatch(r.redis, stream(), [delivery(1)]);
    let runs = 0;
    const { reader: failing } = reader(async () => {
      runs += 1;
      throw new StorageUnavailableError();
    });
    await failing.start();
    await waitFor(() => runs >= 1, 5_000, 'a first run');
    await failing.stop();
    expect(await streamCounts(r.redis, stream())).toEqual({ waiting: 0, active: 1 });
  });
});
