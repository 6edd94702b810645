import { randomUUID } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RangeReplayer } from '../../src/tasks/range-replay.js';
import { RetentionPass } from '../../src/tasks/retention.js';
import { deliveryIdFor } from '../../src/domain/ids.js';
import { RedisEventLog, type EventLogEntry } from '../../src/store/event-log.js';
import { RedisEventBudget } from '../../src/store/rate-limiter.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker } from '../helpers/worker.js';

/** Entries for one webhook's log with bodies of `bodyBytes`. */
function entries(webhookId: string, count: number, bodyBytes: number): EventLogEntry[] {
  const padding = 'x'.repeat(Math.max(0, bodyBytes - 120));
  return Array.from({ length: count }, () => {
    const eventId = randomUUID();
    return {
      webhookId,
      deliveryId: deliveryIdFor(eventId, webhookId),
      eventId,
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      body: JSON.stringify({ event_id: eventId, event_type: 'EVENT_TYPE_MACHINE_CREATED', data: { padding } }),
    };
  });
}

async function appendAll(log: RedisEventLog, all: readonly EventLogEntry[]): Promise<void> {
  for (let i = 0; i < all.length; i += 500) await log.append(all.slice(i, i + 500));
}

describe('the event log: retention, its memory, and a range replay of 100,000 events (real Redis)', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await testApp();
  });
  afterAll(async () => {
    await t.close();
  });

  /** A range replayer over the app's stores whose runs end once everything is queued (no worker here counts outcomes). */
  const queueingReplayer = () => new RangeReplayer(queueingDeps());
  const queueingDeps = (): ConstructorParameters<typeof RangeReplayer>[0] => ({
    queue: t.replayQueue,
    log: t.eventLog,
    countLimits: {
      readMax: t.config.replayCountMax,
      budgetPerSecond: 0,
      budget: new RedisEventBudget(t.redis, t.keys, t.keys.replayCountWindow),
    },
    history: t.deliveryLog,
    queues: t.queues,
    tasks: t.tasks,
    replayTasks: t.replayTasks,
    nowMs: Date.now,
    settleForMs: 0,
  });

  /** Bytes Redis holds for the webhook's log keys (MEMORY USAGE, every element sampled). */
  async function logBytes(webhookId: string): Promise<number> {
    const { log, logBodies, logStatuses } = t.keys.deliveries;
    let total = 0;
    for (const key of [log(webhookId), logBodies(webhookId), logStatuses(webhookId)])
      total += Number((await t.redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
    return total;
  }

  it('removes what the retention has passed, giving the memory back, and says what an event costs', async () => {
    const log = new RedisEventLog(t.redis, t.keys, 5_000);
    const webhookId = randomUUID();
    await appendAll(log, entries(webhookId, 2_000, 1_024));
    const held = await logBytes(webhookId);
    const perEvent = held / 2_000;
    console.log(`event log: ${Math.round(perEvent)} B of Redis per event with a 1,024 B body (${held} B for 2,000)`);
    // The body (its allocation rounded up to the allocator's next size class) and the bookkeeping, no more.
    expect(perEvent).toBeGreaterThan(1_024);
    expect(perEvent).toBeLessThan(1_024 + 600);

    // Past the retention, the maintenance trim removes them all, and the memory goes with them.
    const bodiesKey = t.keys.deliveries.logBodies(webhookId);
    const logKey = t.keys.deliveries.log(webhookId);
    await waitFor(
      async () => {
        await log.trim(webhookId);
        return (await t.redis.hlen(bodiesKey)) === 0 && (await t.redis.xlen(logKey)) === 0;
      },
      15_000,
      'the retention to pass and the trim to remove every event',
    );
    const after = await logBytes(webhookId);
    console.log(`event log: ${after} B left after the trim`);
    expect(after).toBeLessThan(held / 100);
  });

  it('each append trims its webhook’s log past the retention, a bounded number at a time; an idle log expires whole', async () => {
    const retentionMs = 1_000;
    const log = new RedisEventLog(t.redis, t.keys, retentionMs);
    const webhookId = randomUUID();
    const logKey = t.keys.deliveries.log(webhookId);
    const bodies = () => t.redis.hlen(t.keys.deliveries.logBodies(webhookId));
    const redisNowMs = async () => {
      const [seconds, micros] = (await t.redis.call('TIME')) as [string, string];
      return Number(seconds) * 1_000 + Number(micros) / 1_000;
    };
    await appendAll(log, entries(webhookId, 40, 200));
    const newest = Number((await t.redis.xrevrange(logKey, '+', '-', 'COUNT', 1))[0]![0].split('-')[0]);
    // A later append keeps the log alive past the 40's retention (each append renews its expiry).
    await waitFor(async () => (await redisNowMs()) > newest + retentionMs / 2, 5_000, 'half the retention');
    await log.append(entries(webhookId, 1, 200));
    await waitFor(async () => (await redisNowMs()) > newest + retentionMs, 5_000, 'the 40 past the retention');
    await log.append(entries(webhookId, 1, 200));
    // 32 of the 40 went; the two later ones stay.
    expect(await bodies()).toBe(40 - 32 + 2);
    await log.append(entries(webhookId, 1, 200));
    expect(await bodies()).toBe(3);
    expect(await t.redis.xlen(logKey)).toBe(3);
    // Idle for the retention, the whole log expires.
    await waitFor(
      async () => (await t.redis.exists(logKey)) === 0 && (await bodies()) === 0,
      5_000,
      'the idle log to expire',
    );
  });

  it('the retention pass applies a webhook’s shorter retention to its log and finished delivery records', async () => {
    const log = new RedisEventLog(t.redis, t.keys, 7 * 24 * 3_600_000);
    const webhookId = randomUUID();
    const logged = entries(webhookId, 5, 300);
    await appendAll(log, logged);
    const job = (e: EventLogEntry) => ({
      deliveryId: e.deliveryId,
      eventId: e.eventId,
      eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
      vendorId: 'v-retention',
      webhookId,
      body: e.body,
      acceptedAtMs: Date.now() - 1_000,
    });
    await Promise.all(
      logged.map((e) =>
        t.deliveryLog.recordAttempt({
          job: job(e),
          attempt: { attempt: 1, atMs: Date.now(), outcome: 'delivered', statusCode: 200, durationMs: 3 },
          status: 'delivered',
        }),
      ),
    );
    const pass = new RetentionPass({
      webhooks: { listAll: async () => [{ id: webhookId, retentionMs: 200 }] as never },
      log,
      history: t.deliveryLog,
      streams: { redis: t.redis, keys: [] },
      nowMs: Date.now,
    });
    let removed = { events: 0, records: 0 };
    await waitFor(
      async () => {
        const summary = await pass.run();
        removed = { events: removed.events + summary.events, records: removed.records + summary.records };
        return removed.events === 5 && removed.records === 5;
      },
      10_000,
      'the pass to remove the 5 events and their records',
    );
    expect(await t.deliveryLog.recent(webhookId, 10)).toEqual([]);
    // The feed's status came from the records while they lived.
  });

  it('a webhook’s shorter retention keeps an event whose first attempt is not made yet, until the installation’s retention passes', async () => {
    const installation = 7 * 24 * 3_600_000;
    const log = new RedisEventLog(t.redis, t.keys, installation);
    const webhookId = randomUUID();
    const [projected, recorded, waiting, alsoWaiting] = entries(webhookId, 4, 300);
    await log.append([projected!, recorded!, waiting!, alsoWaiting!]);
    const { logStatuses, logBodies, record } = t.keys.deliveries;
    // Attempted: one journaled (its compact record in the statuses), one with a record of its own.
    await t.redis.hset(
      logStatuses(webhookId),
      projected!.deliveryId,
      'delivered\tEVENT_TYPE_MACHINE_CREATED\t200\t1\n{}',
    );
    await t.redis.hset(record(webhookId, recorded!.deliveryId), 'status', 'retrying');
    const bornAt = Date.now();
    await waitFor(() => Date.now() > bornAt + 5, 1_000, 'the entries older than the webhook’s retention');

    expect(await log.trim(webhookId, 1)).toBe(2);
    expect((await t.redis.hkeys(logBodies(webhookId))).sort()).toEqual(
      [waiting!.deliveryId, alsoWaiting!.deliveryId].sort(),
    );
    expect((await log.page(webhookId, { limit: 10 })).events.map((e) => e.deliveryId)).toEqual([
      waiting!.deliveryId,
      alsoWaiting!.deliveryId,
    ]);
    // Its first attempt made, the next trim takes it.
    await t.redis.hset(record(webhookId, waiting!.deliveryId), 'status', 'dead');
    expect(await log.trim(webhookId, 1)).toBe(1);
    expect(await t.redis.hkeys(logBodies(webhookId))).toEqual([alsoWaiting!.deliveryId]);
    // The installation's retention takes what is left, attempted or not.
    expect(await new RedisEventLog(t.redis, t.keys, 1).trim(webhookId)).toBe(1);
    expect(await t.redis.exists(logBodies(webhookId))).toBe(0);
    await t.redis.del(record(webhookId, recorded!.deliveryId), record(webhookId, waiting!.deliveryId));
  });

  it('a worker runs the retention pass on its schedule; it also trims the dead-letter streams past the retention', async () => {
    // HOOKLINE_RETENTION's floor is 1h; the assembly takes any value, so a second here.
    const app = await testApp({ retentionMs: 1_000 });
    const worker = await startTestWorker(app);
    try {
      await waitFor(
        async () => (await app.queues.maintenance.getJobScheduler('retention'))?.every === 60_000,
        10_000,
        'the worker to schedule the pass every minute',
      );
      const dead = app.keys.events.deadOf(0);
      await app.redis.xadd(dead, '*', 'reason', 'unreadable', 'event', '{"event_id":"kept-past-retention"}');
      // Sooner, so the test need not wait a minute: the schedule is replaced, not added to.
      await app.queues.scheduleRetention(250);
      await waitFor(async () => (await app.redis.xlen(dead)) === 0, 15_000, 'the pass to trim the dead stream');
      expect(await app.queues.maintenance.getJobSchedulersCount()).toBe(1);
    } finally {
      await worker.close();
      await app.close();
    }
  });

  it('a range replay whose run died goes on from its last page when run again: every event replayed once', async () => {
    const webhook = await t.register('vendor-resume', 'http://127.0.0.1:9/never');
    await appendAll(t.eventLog, entries(webhook.id, 55, 200));
    const replayer = queueingReplayer();
    const job = { vendorId: 'vendor-resume', webhookId: webhook.id, sinceMs: 0, untilMs: Date.now() + 1_000 };
    const taskId = await replayer.createTask(job.vendorId, job.webhookId);
    const before = await t.queues.counts();
    // The first run dies after its second page (as its worker would), the next one goes on.
    let pages = 0;
    await expect(
      replayer.run(
        { taskId, ...job },
        {
          pageSize: 10,
          onProgress: () => {
            if (++pages === 2) throw new Error('worker killed');
          },
        },
      ),
    ).rejects.toThrow('worker killed');
    expect(await replayer.run({ taskId, ...job }, { pageSize: 10 })).toEqual({ replayed: 55, finished: true });
    const after = await t.queues.counts();
    expect((after.waiting ?? 0) - (before.waiting ?? 0)).toBe(55);
    const replayOf = (await t.deliveryLog.recent(webhook.id, 200)).flatMap((d) => (d.replayOf ? [d.replayOf] : []));
    expect(new Set(replayOf).size).toBe(55);
    expect(replayOf).toHaveLength(55);
  });

  it('a range replay that gives its slot back between pages goes on from there, slice after slice: every event replayed once', async () => {
    const webhook = await t.register('vendor-slices', 'http://127.0.0.1:9/never');
    await appendAll(t.eventLog, entries(webhook.id, 45, 200));
    // It stays to count outcomes for 60 s at most: that deadline is kept across slices.
    const replayer = new RangeReplayer({ ...queueingDeps(), settleForMs: 60_000 });
    const job = { vendorId: 'vendor-slices', webhookId: webhook.id, sinceMs: 0, untilMs: Date.now() + 1_000 };
    const taskId = await replayer.createTask(job.vendorId, job.webhookId);
    const before = await t.queues.counts();
    // Each slice stops at its third look (as a worker's slice ends): after two pages, or, once all
    // is queued, after its first look at the outcomes (nothing delivers the replays here).
    const slice = () => {
      let asked = 0;
      return replayer.run({ taskId, ...job }, { pageSize: 10, shouldStop: () => ++asked > 2 });
    };
    const slices = [await slice(), await slice(), await slice()];
    expect(slices).toEqual([
      { replayed: 20, finished: false },
      { replayed: 40, finished: false },
      { replayed: 45, finished: false },
    ]);
    const { settleUntilMs } = await t.replayTasks.place(taskId);
    expect(settleUntilMs).toBeGreaterThan(Date.now());
    // The next slice waits for outcomes until the same deadline, not a new one.
    expect(await slice()).toEqual({ replayed: 45, finished: false });
    expect((await t.replayTasks.place(taskId)).settleUntilMs).toBe(settleUntilMs);
    expect(await replayer.run({ taskId, ...job }, { pageSize: 10, settle: false })).toEqual({
      replayed: 45,
      finished: true,
    });
    const after = await t.queues.counts();
    expect((after.waiting ?? 0) - (before.waiting ?? 0)).toBe(45);
    const replayOf = (await t.deliveryLog.recent(webhook.id, 200)).flatMap((d) => (d.replayOf ? [d.replayOf] : []));
    expect(new Set(replayOf).size).toBe(45);
    expect(replayOf).toHaveLength(45);
  });

  it('replays a range of 100,000 events a page at a time: the count, every replay queued once, memory bounded', async () => {
    const webhook = await t.register('vendor-100k', 'http://127.0.0.1:9/never');
    const total = 100_000;
    const started = Date.now();
    for (let i = 0; i < total; i += 5_000) await appendAll(t.eventLog, entries(webhook.id, 5_000, 200));
    console.log(`range replay: 100,000 events logged in ${Date.now() - started} ms`);
    const replayer = queueingReplayer();
    const spec = { sinceMs: 0, untilMs: Date.now() + 1_000 };
    // The API's count stops at HOOKLINE_REPLAY_COUNT_MAX (a lower bound); the run's own reads all of it.
    expect(await replayer.count(webhook.id, spec)).toEqual({ count: t.config.replayCountMax, capped: true });
    expect(await replayer.count(webhook.id, spec, Infinity)).toEqual({ count: total, capped: false });

    const before = await t.queues.counts();
    const queuedBefore = (before.waiting ?? 0) + (before.delayed ?? 0);
    const admitted = await replayer.start('vendor-100k', [{ webhookId: webhook.id, spec }]);
    if (!('taskIds' in admitted)) throw new Error(`the replay was refused: ${JSON.stringify(admitted)}`);
    const [taskId] = admitted.taskIds as [string];
    // Live memory, not garbage waiting for a collection: the heap is measured after a full GC.
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    let heapMax = heapBefore;
    const sampler = setInterval(() => {
      gc();
      heapMax = Math.max(heapMax, process.memoryUsage().heapUsed);
    }, 500);
    const runStarted = Date.now();
    let result: { replayed: number };
    try {
      result = await replayer.run({ taskId, vendorId: 'vendor-100k', webhookId: webhook.id, ...spec });
    } finally {
      clearInterval(sampler);
    }
    const grewMb = (heapMax - heapBefore) / 1e6;
    console.log(
      `range replay: 100,000 replays queued in ${Date.now() - runStarted} ms; live heap grew ${grewMb.toFixed(1)} MB at most during the run`,
    );
    expect(result.replayed).toBe(total);
    // A page at a time: far below what 100,000 bodies and jobs would take (about 60 MB for the bodies alone).
    expect(grewMb).toBeLessThan(24);
    const counts = await t.queues.counts();
    expect((counts.waiting ?? 0) + (counts.delayed ?? 0) - queuedBefore).toBe(total);
    const task = await t.replayTasks.view(taskId);
    expect(task?.task.progress).toMatchObject({ total, done: total, queued: total });
  }, 180_000);
});
