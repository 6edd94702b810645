import { Redis as IORedis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { AttemptRecord } from '../../src/domain/delivery.js';
import { RedisAttemptJournal } from '../../src/store/attempt-journal.js';
import {
  RedisDeliveryLog,
  type AttemptWrite,
  type DeliveryLogOptions,
  type DeliverySummary,
} from '../../src/store/delivery-log.js';
import { RedisEventLog } from '../../src/store/event-log.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const HOUR_MS = 3_600_000;
// Tombstones of finished records that fall off the recent list last 1 ms here (5 minutes by default).
const OPTIONS: DeliveryLogOptions = {
  recordFlushMs: 1,
  retentionMs: 2 * HOUR_MS,
  deadLetterRetentionMs: 5 * HOUR_MS,
  recentPerWebhook: 20,
  fallenOffGraceMs: 1,
};
const graceOver = () => new Promise((resolve) => setTimeout(resolve, 20));
const T0 = 1_700_000_000_000;

let t: TestRedis;
let keys: RedisKeys;
let log: RedisDeliveryLog;

beforeEach(() => {
  t = testRedis();
  keys = redisKeys(t.prefix);
  log = new RedisDeliveryLog(t.redis, keys, OPTIONS);
});

afterEach(async () => {
  await t.cleanup();
});

function job(deliveryId: string, overrides: Partial<DeliverJob> = {}): DeliverJob {
  return {
    deliveryId,
    eventId: `evt-${deliveryId}`,
    eventType: 'EVENT_TYPE_MACHINE_CREATED',
    vendorId: 'v1',
    webhookId: 'wh-1',
    body: `{"event_id":"evt-${deliveryId}"}`,
    acceptedAtMs: T0,
    ...overrides,
  };
}

function write(
  target: DeliverJob,
  attempt: number,
  status: AttemptWrite['status'],
  extra: Partial<AttemptRecord> & { nextAttemptAtMs?: number } = {},
): AttemptWrite {
  const { nextAttemptAtMs, ...record } = extra;
  const outcome = status === 'delivered' ? 'delivered' : 'http_5xx';
  return {
    job: target,
    attempt: {
      attempt,
      atMs: target.acceptedAtMs + attempt * 1_000,
      outcome,
      statusCode: status === 'delivered' ? 200 : 503,
      durationMs: 12,
      ...record,
    },
    status,
    ...(nextAttemptAtMs === undefined ? {} : { nextAttemptAtMs }),
  };
}

/** A key's TTL in ms, asserted to lie within a second below `expectedMs`. */
async function expectTtl(key: string, expectedMs: number): Promise<void> {
  const ttlMs = await t.redis.pttl(key);
  expect(ttlMs).toBeGreaterThan(expectedMs - 1_000);
  expect(ttlMs).toBeLessThanOrEqual(expectedMs);
}

describe('RedisDeliveryLog.recordAttempt', () => {
  it('writes the identity fields, the attempt JSON and the retention TTL on a first attempt', async () => {
    const first = job('d-1', { replayOf: 'd-0' });
    const attempt = write(first, 1, 'delivered', { responseSnippet: 'ok' });
    expect(await log.recordAttempt(attempt)).toEqual({ failingSinceMs: undefined });

    const recordKey = keys.deliveries.record('wh-1', 'd-1');
    expect(await t.redis.hgetall(recordKey)).toEqual({
      deliveryId: 'd-1',
      eventId: 'evt-d-1',
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      webhookId: 'wh-1',
      vendorId: 'v1',
      acceptedAtMs: String(T0),
      replayOf: 'd-0',
      status: 'delivered',
      attempts: '1',
      lastOutcome: 'delivered',
      lastStatusCode: '200',
      updatedAtMs: String(T0 + 1_000),
      nextAttemptAtMs: '',
      'attempt:1': JSON.stringify(attempt.attempt),
    });
    await expectTtl(recordKey, OPTIONS.retentionMs);
    expect(await t.redis.zrange(keys.deliveries.ofWebhook('wh-1'), 0, -1, 'WITHSCORES')).toEqual(['d-1', String(T0)]);
    await expectTtl(keys.deliveries.ofWebhook('wh-1'), OPTIONS.deadLetterRetentionMs);
    expect(await t.redis.exists(keys.deliveries.dead('wh-1'))).toBe(0);
  });

  it('sets failing-since on the first failure, keeps it through retries and clears it on delivery', async () => {
    const d = job('d-1');
    const failingSinceKey = keys.deliveries.failingSince('wh-1');

    expect(await log.recordAttempt(write(d, 1, 'retrying', { nextAttemptAtMs: T0 + 5_000 }))).toEqual({
      failingSinceMs: T0 + 1_000,
    });
    expect(await log.recordAttempt(write(d, 2, 'retrying', { nextAttemptAtMs: T0 + 9_000 }))).toEqual({
      failingSinceMs: T0 + 1_000,
    });
    expect(await t.redis.get(failingSinceKey)).toBe(String(T0 + 1_000));
    const retrying = await log.get('wh-1', 'd-1');
    expect(retrying?.delivery).toMatchObject({
      status: 'retrying',
      attempts: 2,
      lastStatusCode: 503,
      nextAttemptAtMs: T0 + 9_000,
    });

    expect(await log.recordAttempt(write(d, 3, 'delivered'))).toEqual({ failingSinceMs: undefined });
    expect(await t.redis.exists(failingSinceKey)).toBe(0);

    const found = await log.get('wh-1', 'd-1');
    expect(found?.delivery).toEqual({
      deliveryId: 'd-1',
      eventId: 'evt-d-1',
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      webhookId: 'wh-1',
      vendorId: 'v1',
      status: 'delivered',
      attempts: 3,
      lastOutcome: 'delivered',
      lastStatusCode: 200,
      acceptedAtMs: T0,
      updatedAtMs: T0 + 3_000,
      nextAttemptAtMs: undefined,
      replayOf: undefined,
    });
    expect(found?.attempts.map((a) => [a.attempt, a.outcome, a.statusCode])).toEqual([
      [1, 'http_5xx', 503],
      [2, 'http_5xx', 503],
      [3, 'delivered', 200],
    ]);
    // The body stays only with dead letters.
    expect(found?.body).toBeUndefined();
    // Identity fields are written once, on the first attempt, and survive the later ones.
    expect(await t.redis.hlen(keys.deliveries.record('wh-1', 'd-1'))).toBe(16);

    // A later failure starts a new run.
    expect(
      await log.recordAttempt(
        write(job('d-2', { acceptedAtMs: T0 + 60_000 }), 1, 'retrying', { nextAttemptAtMs: T0 + 70_000 }),
      ),
    ).toEqual({
      failingSinceMs: T0 + 61_000,
    });
  });

  it('keeps a delivery still being tried for the retention after its next attempt, however short the retention', async () => {
    // A retry due 10 h after an attempt, with a 2 h retention: the record (its attempts) and the
    // webhook's recent list outlive that attempt, so it is made as the second, not a new first.
    const d = job('d-slow');
    const attempt = write(d, 1, 'retrying', { nextAttemptAtMs: T0 + 1_000 + 10 * HOUR_MS });
    await log.recordAttempt(attempt);
    await expectTtl(keys.deliveries.record('wh-1', 'd-slow'), 12 * HOUR_MS);
    await expectTtl(keys.deliveries.ofWebhook('wh-1'), 12 * HOUR_MS);
    // Delivered at last: the retention from then.
    await log.recordAttempt(write(d, 2, 'delivered'));
    await expectTtl(keys.deliveries.record('wh-1', 'd-slow'), OPTIONS.retentionMs);
  });

  it('keeps the body of a dead letter, adds it to the dead set and keeps it for the dead-letter retention', async () => {
    const d = job('d-1');
    await log.recordAttempt(write(d, 1, 'retrying', { nextAttemptAtMs: T0 + 5_000 }));
    expect(await log.recordAttempt(write(d, 2, 'dead', { error: 'gave up' }))).toEqual({ failingSinceMs: T0 + 1_000 });

    const recordKey = keys.deliveries.record('wh-1', 'd-1');
    await expectTtl(recordKey, OPTIONS.deadLetterRetentionMs);
    expect(await t.redis.zrange(keys.deliveries.dead('wh-1'), 0, -1, 'WITHSCORES')).toEqual([
      'd-1',
      String(T0 + 2_000),
    ]);
    await expectTtl(keys.deliveries.dead('wh-1'), OPTIONS.deadLetterRetentionMs);

    const found = await log.get('wh-1', 'd-1');
    expect(found?.body).toBe(d.body);
    expect(found?.delivery.status).toBe('dead');
    expect(found?.attempts.at(-1)?.error).toBe('gave up');
    expect((await log.deadLetters('wh-1', 10)).map((s) => [s.deliveryId, s.status])).toEqual([['d-1', 'dead']]);
    expect(await log.deadLetterIds('wh-1', 10)).toEqual(['d-1']);
  });

  it('drops dead letters older than the dead-letter retention from the dead set', async () => {
    const old = job('d-old');
    await log.recordAttempt(write(old, 1, 'dead'));
    const late = job('d-late', { acceptedAtMs: T0 + OPTIONS.deadLetterRetentionMs + 10_000 });
    await log.recordAttempt(write(late, 1, 'dead'));
    expect(await log.deadLetterIds('wh-1', 10)).toEqual(['d-late']);
  });

  it('keeps the recent list at its cap, deleting finished records that fall off and keeping dead and retrying ones', async () => {
    const cap = OPTIONS.recentPerWebhook;
    const total = cap + 50;
    const id = (i: number) => `d-${String(i).padStart(3, '0')}`;
    const statusOf = (i: number): AttemptWrite['status'] =>
      i === 3 || i === 7 ? 'dead' : i === 5 ? 'retrying' : 'delivered';
    for (let i = 0; i < total; i += 1) {
      const d = job(id(i), { acceptedAtMs: T0 + i });
      await log.recordAttempt(
        write(d, 1, statusOf(i), statusOf(i) === 'retrying' ? { nextAttemptAtMs: T0 + 60_000 } : {}),
      );
      // d-007's replay is queued while it is still on the list: a replayed record goes like a delivered one.
      if (i === 10) expect(await log.markReplayed('wh-1', id(7), T0 + 100)).toBe(true);
    }

    const recentKey = keys.deliveries.ofWebhook('wh-1');
    expect(await t.redis.zcard(recentKey)).toBe(cap);
    const recent = await log.recent('wh-1', 1_000);
    expect(recent.map((s) => s.deliveryId)).toEqual(Array.from({ length: cap }, (_, i) => id(total - 1 - i)));

    await graceOver();
    const kept = await t.redis.exists(
      ...Array.from({ length: total - cap }, (_, i) => keys.deliveries.record('wh-1', id(i))),
    );
    expect(kept).toBe(2);
    expect((await log.get('wh-1', id(3)))?.body).toBe(job(id(3)).body);
    expect((await log.get('wh-1', id(5)))?.delivery.status).toBe('retrying');
    expect(await t.redis.exists(keys.deliveries.record('wh-1', id(7)))).toBe(0);
    expect(await log.get('wh-1', id(0))).toBeUndefined();
    expect(await log.deadLetterIds('wh-1', 10)).toEqual([id(3)]);
  });

  it('deletes a replayed record once it falls off the recent list', async () => {
    const small = new RedisDeliveryLog(t.redis, keys, { ...OPTIONS, recentPerWebhook: 2 });
    await small.recordAttempt(write(job('d-1', { acceptedAtMs: T0 }), 1, 'dead'));
    expect(await small.markReplayed('wh-1', 'd-1', T0 + 10)).toBe(true);
    await small.recordAttempt(write(job('d-2', { acceptedAtMs: T0 + 1 }), 1, 'delivered'));
    expect(await t.redis.exists(keys.deliveries.record('wh-1', 'd-1'))).toBe(1);
    await small.recordAttempt(write(job('d-3', { acceptedAtMs: T0 + 2 }), 1, 'delivered'));
    await graceOver();
    expect(await t.redis.exists(keys.deliveries.record('wh-1', 'd-1'))).toBe(0);
    expect(await t.redis.zrange(keys.deliveries.ofWebhook('wh-1'), 0, -1)).toEqual(['d-2', 'd-3']);
  });

  it('removes a bounded number of overflow ids per attempt', async () => {
    const recentKey = keys.deliveries.ofWebhook('wh-1');
    // A list far over the cap, as an older version of the log could leave behind.
    const members = Array.from({ length: 200 }, (_, i) => [T0 + i, `old-${String(i).padStart(3, '0')}`] as const);
    await t.redis.zadd(recentKey, ...members.flat());
    await log.recordAttempt(write(job('d-new', { acceptedAtMs: T0 + 1_000 }), 1, 'delivered'));
    expect(await t.redis.zcard(recentKey)).toBe(201 - 64);
    expect(await t.redis.zscore(recentKey, 'old-063')).toBeNull();
    expect(await t.redis.zscore(recentKey, 'old-064')).not.toBeNull();
  });

  it('keeps every key of a webhook under its hash tag', () => {
    const tag = `{${t.prefix}:wh:wh-1}`;
    for (const key of [
      keys.deliveries.record('wh-1', 'd-1'),
      keys.deliveries.record('wh-1', ''),
      keys.deliveries.ofWebhook('wh-1'),
      keys.deliveries.dead('wh-1'),
      keys.deliveries.failingSince('wh-1'),
    ]) {
      expect(key.startsWith(tag)).toBe(true);
    }
  });
});

describe('RedisDeliveryLog.progressOf', () => {
  it('answers status, attempts and next attempt time per ref, in order, and undefined for unknown ones', async () => {
    await log.recordAttempt(write(job('d-1'), 1, 'delivered'));
    await log.recordAttempt(write(job('d-2', { webhookId: 'wh-2' }), 1, 'retrying', { nextAttemptAtMs: T0 + 30_000 }));
    await log.recordAttempt(write(job('d-2', { webhookId: 'wh-2' }), 2, 'retrying', { nextAttemptAtMs: T0 + 90_000 }));
    await log.recordAttempt(write(job('d-3'), 1, 'dead'));
    await log.recordDropped(job('d-4'), T0 + 5);

    expect(
      await log.progressOf([
        { webhookId: 'wh-2', deliveryId: 'd-2' },
        { webhookId: 'wh-1', deliveryId: 'missing' },
        { webhookId: 'wh-1', deliveryId: 'd-1' },
        { webhookId: 'wh-1', deliveryId: 'd-3' },
        { webhookId: 'wh-1', deliveryId: 'd-2' },
        { webhookId: 'wh-1', deliveryId: 'd-4' },
      ]),
    ).toEqual([
      { status: 'retrying', attempts: 2, nextAttemptAtMs: T0 + 90_000 },
      undefined,
      { status: 'delivered', attempts: 1, nextAttemptAtMs: undefined },
      { status: 'dead', attempts: 1, nextAttemptAtMs: undefined },
      undefined,
      { status: 'dropped', attempts: 0, nextAttemptAtMs: undefined },
    ]);
    expect(await log.progressOf([])).toEqual([]);
  });
});

describe('RedisDeliveryLog.eventBodies', () => {
  it('answers the body each delivery was sent with from the event log or a dead letter’s record, in order, across webhooks', async () => {
    const eventLog = new RedisEventLog(t.redis, keys, OPTIONS.retentionMs);
    const logged = job('d-1', { webhookId: 'wh-2', body: '{"data":"logged"}' });
    await eventLog.append([logged]);
    await log.recordAttempt(write(logged, 1, 'delivered'));
    // Dead, and not in the event log (as with HOOKLINE_EVENT_LOG=false): its record keeps its body.
    const dead = job('d-2', { body: '{"data":"dead"}' });
    await log.recordAttempt(write(dead, 1, 'dead'));
    await log.markReplayed('wh-1', 'd-2', T0 + 10);
    const replays = [
      job('r-1', { webhookId: 'wh-2', replayOf: 'd-1', body: logged.body }),
      job('r-2', { replayOf: 'd-2', body: dead.body }),
    ];
    await log.recordQueued(replays);
    // A test event: in no log, never dead.
    await log.recordAttempt(write(job('t-1', { body: '{"data":"test"}' }), 1, 'delivered'));

    const summaries = await Promise.all(
      [
        ['wh-1', 't-1'],
        ['wh-2', 'r-1'],
        ['wh-1', 'd-2'],
        ['wh-2', 'd-1'],
        ['wh-1', 'r-2'],
      ].map(async ([webhookId, deliveryId]) => (await log.get(webhookId!, deliveryId!))!.delivery),
    );
    expect(await log.eventBodies(summaries)).toEqual([
      undefined,
      '{"data":"logged"}',
      '{"data":"dead"}',
      '{"data":"logged"}',
      '{"data":"dead"}',
    ]);
    expect(await log.eventBodies([])).toEqual([]);
  });
});

describe('RedisDeliveryLog on a shared connection', () => {
  it('writes attempts recorded together in one batch, each as if alone: its own webhook’s failure run, fields and trim', async () => {
    const batched = new RedisDeliveryLog(t.redis, keys, { ...OPTIONS, recordFlushMs: 20, recentPerWebhook: 50 });
    // 300 attempts at once over three webhooks (more than one script call holds): wh-a always delivers,
    // wh-b always fails, wh-c fails and then delivers.
    const writes = Array.from({ length: 300 }, (_, i) => {
      const webhookId = ['wh-a', 'wh-b', 'wh-c'][i % 3]!;
      const target = job(`${webhookId}-d${i}`, { webhookId, acceptedAtMs: T0 + i });
      const status: AttemptWrite['status'] =
        webhookId === 'wh-a' || (webhookId === 'wh-c' && i >= 150) ? 'delivered' : 'retrying';
      return write(target, 1, status, status === 'retrying' ? { nextAttemptAtMs: T0 + 60_000 } : {});
    });
    const results = await Promise.all(writes.map((w) => batched.recordAttempt(w)));
    // A failing attempt reports when its webhook's run of failures began: the first failure's time.
    const firstFailureOf = (webhookId: string) =>
      Math.min(
        ...writes.filter((w) => w.job.webhookId === webhookId && w.status === 'retrying').map((w) => w.attempt.atMs),
      );
    results.forEach((result, i) => {
      const w = writes[i]!;
      expect(result.failingSinceMs).toBe(w.status === 'delivered' ? undefined : firstFailureOf(w.job.webhookId));
    });
    // wh-c's deliveries after its failures ended its run; wh-b's run goes on.
    expect(await t.redis.get(keys.deliveries.failingSince('wh-c'))).toBeNull();
    expect(await t.redis.get(keys.deliveries.failingSince('wh-b'))).toBe(String(firstFailureOf('wh-b')));
    // Each webhook's recent list holds its newest 50; every record is complete.
    for (const webhookId of ['wh-a', 'wh-b', 'wh-c']) {
      const ids = await t.redis.zrange(keys.deliveries.ofWebhook(webhookId), 0, -1);
      expect(ids).toHaveLength(50);
      const newest = writes.filter((w) => w.job.webhookId === webhookId).slice(-50);
      expect(ids).toEqual(newest.map((w) => w.job.deliveryId));
      const summaries = await batched.recent(webhookId, 50);
      expect(summaries.map((s) => [s.deliveryId, s.status, s.eventId, s.vendorId])).toEqual(
        [...newest].reverse().map((w) => [w.job.deliveryId, w.status, w.job.eventId, 'v1']),
      );
    }
  });

  it('works from every log on one connection (their script registered once), each with its own options', async () => {
    const other = new RedisDeliveryLog(t.redis, keys, { ...OPTIONS, recentPerWebhook: 1 });
    await log.recordAttempt(write(job('d-1'), 1, 'delivered'));
    await other.recordAttempt(write(job('d-2', { acceptedAtMs: T0 + 1 }), 1, 'delivered'));
    // Each log passes its own options: the second's cap of one applied.
    expect(await t.redis.zrange(keys.deliveries.ofWebhook('wh-1'), 0, -1)).toEqual(['d-2']);
    await graceOver();
    expect(await t.redis.exists(keys.deliveries.record('wh-1', 'd-1'))).toBe(0);
  });

  it('leaves a tombstone of a delivered record that fell off the list for the grace period, so a batch re-run still sees it', async () => {
    const graced = new RedisDeliveryLog(t.redis, keys, { ...OPTIONS, recentPerWebhook: 1, fallenOffGraceMs: 60_000 });
    await graced.recordAttempt(write(job('d-1', { acceptedAtMs: T0 }), 1, 'delivered'));
    await graced.recordAttempt(write(job('d-2', { acceptedAtMs: T0 + 1 }), 1, 'delivered'));
    expect(await t.redis.zrange(keys.deliveries.ofWebhook('wh-1'), 0, -1)).toEqual(['d-2']);
    const ttl = await t.redis.pttl(keys.deliveries.record('wh-1', 'd-1'));
    expect(ttl).toBeGreaterThan(50_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    expect(await t.redis.hgetall(keys.deliveries.record('wh-1', 'd-1'))).toEqual({ status: 'delivered' });
    expect((await graced.progressOf([{ webhookId: 'wh-1', deliveryId: 'd-1' }]))[0]).toMatchObject({
      status: 'delivered',
    });
    // Off the list it is no longer a delivery the API shows.
    expect(await graced.get('wh-1', 'd-1')).toBeUndefined();
  });
});

describe('RedisDeliveryLog.recordDeferred', () => {
  it('makes a held-back first attempt a pending delivery that says when it will be tried, keeping when it was due', async () => {
    const d = job('d-held');
    await log.recordDeferred([{ job: d, nextAttemptAtMs: T0 + 30_000, dueAtMs: T0 }]);
    expect((await log.progressOf([d]))[0]).toEqual({
      status: 'pending',
      attempts: 0,
      nextAttemptAtMs: T0 + 30_000,
      dueAtMs: T0,
    });
    expect(await log.recent('wh-1', 10)).toEqual([
      expect.objectContaining({ deliveryId: 'd-held', status: 'pending', attempts: 0, nextAttemptAtMs: T0 + 30_000 }),
    ]);
    await expectTtl(keys.deliveries.record('wh-1', 'd-held'), OPTIONS.retentionMs);

    // Held back again: the next attempt moves, the time it was due does not.
    await log.recordDeferred([{ job: d, nextAttemptAtMs: T0 + 34_000, dueAtMs: T0 + 30_000 }]);
    expect((await log.progressOf([d]))[0]).toMatchObject({ nextAttemptAtMs: T0 + 34_000, dueAtMs: T0 });
  });

  it('keeps a delivery held back past the retention for the retention after the attempt it waits for', async () => {
    // Held 10 h (a webhook paused by its vendor) with a 2 h retention, new and then already recorded.
    const nowMs = Date.now();
    const fresh = job('d-new', { acceptedAtMs: nowMs });
    await log.recordDeferred([{ job: fresh, nextAttemptAtMs: nowMs + 10 * HOUR_MS, dueAtMs: nowMs }]);
    await expectTtl(keys.deliveries.record('wh-1', 'd-new'), 12 * HOUR_MS);
    await expectTtl(keys.deliveries.ofWebhook('wh-1'), 12 * HOUR_MS);
    const tried = job('d-tried', { acceptedAtMs: nowMs });
    await log.recordAttempt({ ...write(tried, 1, 'retrying'), nextAttemptAtMs: nowMs + 5_000 });
    await log.recordDeferred([{ job: tried, nextAttemptAtMs: nowMs + 10 * HOUR_MS, dueAtMs: nowMs + 5_000 }]);
    await expectTtl(keys.deliveries.record('wh-1', 'd-tried'), 12 * HOUR_MS);
    // A shorter hold never shortens what it has.
    await log.recordDeferred([{ job: tried, nextAttemptAtMs: nowMs + HOUR_MS, dueAtMs: nowMs + 5_000 }]);
    await expectTtl(keys.deliveries.record('wh-1', 'd-tried'), 12 * HOUR_MS);
  });

  it('belongs to the attempt it held back: after the next attempt is recorded, its due time is the schedule again', async () => {
    const d = job('d-retry');
    await log.recordAttempt(write(d, 1, 'retrying', { nextAttemptAtMs: T0 + 5_000 }));
    await log.recordDeferred([{ job: d, nextAttemptAtMs: T0 + 35_000, dueAtMs: T0 + 5_000 }]);
    expect((await log.progressOf([d]))[0]).toEqual({
      status: 'retrying',
      attempts: 1,
      nextAttemptAtMs: T0 + 35_000,
      dueAtMs: T0 + 5_000,
    });
    await log.recordAttempt(write(d, 2, 'retrying', { nextAttemptAtMs: T0 + 300_000 }));
    expect((await log.progressOf([d]))[0]).toEqual({
      status: 'retrying',
      attempts: 2,
      nextAttemptAtMs: T0 + 300_000,
      dueAtMs: undefined,
    });
    await log.recordDeferred([{ job: d, nextAttemptAtMs: T0 + 330_000, dueAtMs: T0 + 300_000 }]);
    expect((await log.progressOf([d]))[0]).toMatchObject({
      attempts: 2,
      nextAttemptAtMs: T0 + 330_000,
      dueAtMs: T0 + 300_000,
    });
  });
});

describe('RedisDeliveryLog with the attempt journal', () => {
  /** A log that journals, the journal (never started: each test projects when it says), and the event log beside them. */
  function journaling(logOptions: Partial<DeliveryLogOptions> = {}) {
    const journaled = new RedisDeliveryLog(t.redis, keys, { ...OPTIONS, ...logOptions });
    const journal = new RedisAttemptJournal(t.redis, keys, {
      shards: 2,
      everyMs: 60_000,
      leaseMs: 2_000,
      project: (rows) => journaled.project(rows),
    });
    journaled.journalTo(journal);
    return { journaled, journal, eventLog: new RedisEventLog(t.redis, keys, OPTIONS.retentionMs) };
  }
  const journalWrite = (target: DeliverJob): AttemptWrite => ({ ...write(target, 1, 'delivered'), journal: true });
  const recordKeys = async () => (await t.redis.keys(`${keys.deliveries.record('wh-1', '')}*`)).sort();

  it("projects all of a webhook's attempts of a pass in one call, however the journal interleaved them with another's", async () => {
    const { journaled, journal, eventLog } = journaling();
    // 200 attempts alternating between two webhooks: more than one call holds (128), so calls that
    // took them in journal order would each hold both webhooks and pay each one's commands again.
    const deliveries = Array.from({ length: 200 }, (_, n) =>
      job(`d-${n}`, { webhookId: n % 2 === 0 ? 'wh-a' : 'wh-b' }),
    );
    await eventLog.append(deliveries);
    await Promise.all(deliveries.map((d) => journaled.recordAttempt(journalWrite(d))));
    const client = new IORedis(t.url);
    const monitor = await client.monitor();
    const recentListAdds: string[] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[0]?.toLowerCase() === 'zadd' && args[1]?.startsWith(`{${t.prefix}`)) recentListAdds.push(args[1]);
    });
    try {
      expect(await journal.drain()).toBe(200);
      // MONITOR reports a command once it ran; the PING after the drain comes back after them.
      await t.redis.ping();
      await waitFor(() => recentListAdds.length >= 3, 5_000);
    } finally {
      monitor.disconnect();
      client.disconnect();
    }
    // Sorted by webhook: wh-a's 100 in the first call with 28 of wh-b's, the other 72 in the second.
    expect(recentListAdds.sort()).toEqual([
      keys.deliveries.ofWebhook('wh-a'),
      keys.deliveries.ofWebhook('wh-b'),
      keys.deliveries.ofWebhook('wh-b'),
    ]);
    // Every attempt projected: a compact record each in its webhook's event log statuses.
    expect(await t.redis.hlen(keys.deliveries.logStatuses('wh-a'))).toBe(100);
    expect(await t.redis.hlen(keys.deliveries.logStatuses('wh-b'))).toBe(100);
  });

  it('keeps a delivered first attempt without a key of its own, and every read shows it once projected', async () => {
    const { journaled, journal, eventLog } = journaling();
    const d = job('d-1', { body: '{"data":"d-1"}' });
    await eventLog.append([d]);
    await journaled.recordAttempt(journalWrite(d));

    // Journaled: no record, and (not projected yet) not listed; its own re-run would still see it delivered.
    expect(await recordKeys()).toEqual([]);
    expect(await journaled.recent('wh-1', 10)).toEqual([]);
    expect((await journaled.progressOf([d]))[0]).toMatchObject({ status: 'delivered', attempts: 1 });

    expect(await journal.drain()).toBe(1);
    expect(await recordKeys()).toEqual([]);
    expect(await t.redis.xlen(keys.deliveries.journal(0))).toBe(0);
    expect(await t.redis.xlen(keys.deliveries.journal(1))).toBe(0);
    const summary = {
      deliveryId: 'd-1',
      eventId: 'evt-d-1',
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      webhookId: 'wh-1',
      vendorId: 'v1',
      status: 'delivered',
      attempts: 1,
      lastOutcome: 'delivered',
      lastStatusCode: 200,
      acceptedAtMs: T0,
      updatedAtMs: T0 + 1_000,
      nextAttemptAtMs: undefined,
      replayOf: undefined,
    };
    expect(await journaled.recent('wh-1', 10)).toEqual([summary]);
    expect(await journaled.page('wh-1', { limit: 10, status: 'delivered' })).toEqual({
      deliveries: [summary],
      next: undefined,
    });
    expect((await journaled.page('wh-1', { limit: 10, status: 'retrying' })).deliveries).toEqual([]);
    expect((await journaled.page('wh-1', { limit: 10, eventType: 'EVENT_TYPE_MACHINE_CREATED' })).deliveries).toEqual([
      summary,
    ]);
    expect(await journaled.get('wh-1', 'd-1')).toEqual({
      delivery: summary,
      attempts: [write(d, 1, 'delivered').attempt],
      body: undefined,
    });
    expect((await journaled.progressOf([d]))[0]).toEqual({
      status: 'delivered',
      attempts: 1,
      nextAttemptAtMs: undefined,
      dueAtMs: undefined,
    });
    expect(await journaled.health(['wh-1'])).toEqual([
      { failingSinceMs: undefined, deadLetters: 0, last: { outcome: 'delivered', statusCode: 200, atMs: T0 + 1_000 } },
    ]);
    expect(await journaled.eventBodies([summary as DeliverySummary])).toEqual(['{"data":"d-1"}']);
    // The event feed reads the status the compact record starts with.
    expect((await eventLog.page('wh-1', { limit: 10 })).events.map((e) => e.status)).toEqual(['delivered']);
    expect(await eventLog.count('wh-1', { statuses: ['delivered'] })).toMatchObject({ count: 1 });
  });

  it('keeps a journaled attempt in its compact form and reads back exactly what was recorded, the rarer facts too', async () => {
    const { journaled, journal, eventLog } = journaling();
    const sent = { host: 'hooks.example.com', bodyBytes: 14, signatures: 1, userAgent: 'Hookline/test' };
    const cases: [DeliverJob, AttemptRecord, 'positional' | 'json'][] = [
      [job('d-plain'), { ...write(job('d-plain'), 1, 'delivered').attempt, responseSnippet: '', sent }, 'positional'],
      [
        job('d-rich'),
        {
          ...write(job('d-rich'), 1, 'delivered').attempt,
          responseSnippet: 'ok\tthen\na second line',
          traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
          sent: {
            ...sent,
            keySignatures: 2,
            headerNames: ['X-Tenant'],
            authScheme: 'Bearer',
            traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
          },
        },
        'positional',
      ],
      // A tab in a positional value, or no answer kept: the JSON form.
      [
        job('d-tab', { eventId: 'evt\twith-tab' }),
        { ...write(job('d-tab'), 1, 'delivered').attempt, responseSnippet: '', sent },
        'json',
      ],
      [job('d-nosnippet'), { ...write(job('d-nosnippet'), 1, 'delivered').attempt, sent }, 'json'],
    ];
    await eventLog.append(cases.map(([d]) => d));
    await Promise.all(cases.map(([d, attempt]) => journaled.recordAttempt({ ...journalWrite(d), attempt })));
    expect(await journal.drain()).toBe(cases.length);
    for (const [d, attempt, form] of cases) {
      const value = await t.redis.hget(keys.deliveries.logStatuses('wh-1'), d.deliveryId);
      const rest = value!.slice(value!.indexOf('\n') + 1);
      expect(rest.startsWith('2\t') ? 'positional' : rest.startsWith('{') ? 'json' : rest).toBe(form);
      const read = await journaled.get('wh-1', d.deliveryId);
      expect(read?.attempts).toEqual([attempt]);
      expect(read?.delivery).toMatchObject({ eventId: d.eventId, vendorId: d.vendorId, acceptedAtMs: d.acceptedAtMs });
    }
    // The positional form is what keeps the hot path's bytes down: well under the JSON's.
    const plain = await t.redis.hget(keys.deliveries.logStatuses('wh-1'), 'd-plain');
    const json = await t.redis.hget(keys.deliveries.logStatuses('wh-1'), 'd-nosnippet');
    expect(plain!.length).toBeLessThan(json!.length * 0.6);
  });

  it('records what must have a record: a failure, a replay, an attempt not marked for the journal, and any delivery to a webhook failing here', async () => {
    const { journaled, journal, eventLog } = journaling();
    const [failed, replay, unmarked, afterFailure] = [
      job('d-f'),
      job('d-r', { replayOf: 'd-0' }),
      job('d-u'),
      job('d-a'),
    ];
    await eventLog.append([failed, unmarked, afterFailure]);
    await journaled.recordAttempt(write(unmarked, 1, 'delivered'));
    await journaled.recordAttempt(journalWrite(replay));
    await journaled.recordAttempt({ ...write(failed, 1, 'retrying', { nextAttemptAtMs: T0 + 60_000 }), journal: true });
    expect(await t.redis.exists(keys.deliveries.failingSince('wh-1'))).toBe(1);
    // Delivered right after a failure recorded by this process: its record ends the failure run at once.
    await journaled.recordAttempt(journalWrite(afterFailure));
    expect(await recordKeys()).toEqual(
      ['d-a', 'd-f', 'd-r', 'd-u'].map((id) => keys.deliveries.record('wh-1', id)).sort(),
    );
    expect(await t.redis.exists(keys.deliveries.failingSince('wh-1'))).toBe(0);
    expect(await journal.drain()).toBe(0);
  });

  it('ends a failure run that began before the journaled delivery, and keeps one that began after it', async () => {
    const { journaled, journal, eventLog } = journaling();
    const early = job('d-early');
    await eventLog.append([early]);
    // Another worker recorded a failure before this delivery's attempt (at T0 + 1 s)…
    await t.redis.set(keys.deliveries.failingSince('wh-1'), String(T0 + 500));
    await journaled.recordAttempt(journalWrite(early));
    await journal.drain();
    expect(await t.redis.get(keys.deliveries.failingSince('wh-1'))).toBeNull();

    // …and one after it: the run goes on, however late the projection.
    const late = job('d-late');
    await eventLog.append([late]);
    await journaled.recordAttempt(journalWrite(late));
    await t.redis.set(keys.deliveries.failingSince('wh-1'), String(T0 + 2_000));
    await journal.drain();
    expect(await t.redis.get(keys.deliveries.failingSince('wh-1'))).toBe(String(T0 + 2_000));
  });

  it('writes nothing back for an event erased before the projection', async () => {
    const { journaled, journal, eventLog } = journaling();
    const d = job('d-erased');
    await eventLog.append([d]);
    await journaled.recordAttempt(journalWrite(d));
    await eventLog.erase('wh-1', ['d-erased']);
    expect(await journal.drain()).toBe(1);
    expect(await t.redis.hget(keys.deliveries.logStatuses('wh-1'), 'd-erased')).toBeNull();
    expect(await journaled.recent('wh-1', 10)).toEqual([]);
    expect(await journaled.get('wh-1', 'd-erased')).toBeUndefined();
  });

  it('shows the journaled attempt over the pending record a deferral left before it', async () => {
    const { journaled, journal, eventLog } = journaling();
    const d = job('d-deferred');
    await eventLog.append([d]);
    await journaled.recordDeferred([{ job: d, nextAttemptAtMs: T0 + 5_000, dueAtMs: T0 }]);
    await journaled.recordAttempt(journalWrite(d));
    await journal.drain();
    expect((await journaled.recent('wh-1', 10)).map((s) => [s.status, s.attempts])).toEqual([['delivered', 1]]);
    expect((await journaled.get('wh-1', 'd-deferred'))?.attempts).toHaveLength(1);
    expect((await journaled.progressOf([d]))[0]).toMatchObject({ status: 'delivered' });
  });

  it('lets one process at a time project a shard: another takes it over once its lease ends', async () => {
    const { journaled, journal, eventLog } = journaling();
    const other = new RedisAttemptJournal(t.redis, keys, {
      shards: 2,
      everyMs: 60_000,
      leaseMs: 2_000,
      project: (rows) => journaled.project(rows),
    });
    await journal.drain();
    const d = job('d-lease');
    await eventLog.append([d]);
    await journaled.recordAttempt(journalWrite(d));
    // The first journal holds both shards' leases (it drained them): the other projects nothing…
    expect(await other.drain()).toBe(0);
    // …until the lease ends (the first process died): then it projects what was left.
    await waitFor(async () => (await other.drain()) === 1, 10_000, 'the lease to end');
    expect((await journaled.recent('wh-1', 10)).map((s) => s.status)).toEqual(['delivered']);
  });
});
