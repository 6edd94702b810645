import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventLogEntry } from '../../src/store/event-log.js';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { TestReceiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

/** Events in the hammering vendor's log: each count of it would read them all without a bound. */
const BIG_LOG = 20_000;
const SMALL_LOG = 100;
/** A worker's replay slots here, and each run's time slice: few and short, so slots are what vendors contend for. */
const SLOTS = 2;
const SLICE_MS = 500;

/** `n` log entries for a webhook, bodies of about 300 bytes. */
function entries(webhookId: string, n: number): EventLogEntry[] {
  const body = JSON.stringify({ version: '1.0', data: { note: 'x'.repeat(280) } });
  return Array.from({ length: n }, () => ({
    webhookId,
    deliveryId: randomUUID(),
    eventId: randomUUID(),
    eventType: 'EVENT_TYPE_MACHINE_CREATED',
    body,
  }));
}

const quantile = (sorted: readonly number[], q: number) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const summary = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  return { n: sorted.length, p50: quantile(sorted, 0.5), p95: quantile(sorted, 0.95), max: sorted.at(-1) ?? NaN };
};
const ms = (n: number) => n.toFixed(1);

describe('one vendor’s range replays against another’s (real Redis, two vendors)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  /** A connection of the test's own, for PINGs that measure Redis's latency. */
  let probe: Redis;
  let big: { id: string; key: string };
  let small: { id: string; key: string };
  /** A third vendor's webhook, whose log holds 50 events: its replays, paced, run long. */
  let paced: { id: string; key: string };

  beforeAll(async () => {
    t = await testApp();
    receiver = new TestReceiver();
    await receiver.start();
    worker = await startTestWorker(t, { replays: { slots: SLOTS, sliceMs: SLICE_MS } });
    probe = connectRedis(t.url, { connectionName: `hookline-test-probe-${t.prefix}`, maxRetriesPerRequest: 3 });
    big = await t.register('vendor-hammer', `${receiver.base}/hammer`);
    small = await t.register('vendor-quiet', `${receiver.base}/quiet`);
    paced = await t.register('vendor-many', `${receiver.base}/many`);
    for (let n = 0; n < BIG_LOG; n += 500) await t.eventLog.append(entries(big.id, 500));
    await t.eventLog.append(entries(small.id, SMALL_LOG));
    await t.eventLog.append(entries(paced.id, 50));
  });
  afterAll(async () => {
    await probe.quit();
    await worker.close();
    await receiver.close();
    await t.close();
  });

  /** PINGs Redis every 10 ms until `done` resolves: their round-trip times. */
  async function pingsUntil(done: Promise<unknown>): Promise<number[]> {
    const pings: number[] = [];
    let over = false;
    void done.finally(() => (over = true));
    for (let n = 0; n < 100_000 && !over; n += 1) {
      const startedAt = performance.now();
      await probe.ping();
      pings.push(performance.now() - startedAt);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return pings;
  }

  const replay = (webhook: { id: string; key: string }, extra: object = {}) =>
    t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/replay`,
      headers: { 'x-api-key': webhook.key },
      payload: { since: new Date(0).toISOString(), ...extra },
    });
  const taskStatus = async (webhook: { key: string }, taskId: string) =>
    (
      await t.app.inject({
        method: 'GET',
        url: `/rental/v1/tasks/${taskId}`,
        headers: { 'x-api-key': webhook.key },
      })
    ).json<{ status: string }>().status;

  const dryRun = (webhook: { id: string; key: string }, extra: object = {}) =>
    t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/replay`,
      headers: { 'x-api-key': webhook.key },
      payload: { since: new Date(0).toISOString(), dry_run: true, ...extra },
    });

  it('a count reads at most HOOKLINE_REPLAY_COUNT_MAX events (a lower bound past it), and a vendor’s counts share a budget per second', async () => {
    const countMax = t.config.replayCountMax;
    expect(BIG_LOG).toBeGreaterThan(countMax);
    // Five at once: the first takes the second's budget (a count of the big log may read countMax
    // events); the others answer 429 and read nothing, but for one that lands in the next second.
    const answers = await Promise.all(Array.from({ length: 5 }, () => dryRun(big, { statuses: ['pending'] })));
    const counted = answers.filter((a) => a.statusCode === 200);
    const refused = answers.filter((a) => a.statusCode === 429);
    console.log(
      `counts of a ${BIG_LOG}-event log, five at once: ${counted.length} answered, ${refused.length} refused`,
    );
    expect(counted.length).toBeGreaterThanOrEqual(1);
    expect(counted.length).toBeLessThanOrEqual(2);
    expect(counted.length + refused.length).toBe(5);
    for (const answer of counted) expect(answer.json()).toEqual({ count: countMax, capped: true });
    for (const answer of refused) {
      expect(answer.json()).toMatchObject({ code: 'replay_count_limited' });
      expect(answer.headers['retry-after']).toBe('1');
    }
    // The other vendor's budget is its own: its count answers in full.
    expect((await dryRun(small)).json()).toEqual({ count: SMALL_LOG, capped: false });
  });

  it('one vendor sending dry runs of a big log inside its request limit leaves Redis and another vendor’s requests fast', async () => {
    const hammerForMs = 2_000;
    const until = Date.now() + hammerForMs;
    let hammered = 0;
    let limited = 0;
    // About 80 requests a second, as a client inside the default request limit (100/s) would send.
    const hammer = Array.from({ length: 8 }, async () => {
      for (let n = 0; n < 1_000 && Date.now() < until; n += 1) {
        const answer = await dryRun(big, { statuses: ['pending', 'delivered'] });
        hammered += 1;
        if (answer.statusCode === 429) limited += 1;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    });
    const pings: number[] = [];
    const pinging = (async () => {
      for (let n = 0; n < 10_000 && Date.now() < until; n += 1) {
        const startedAt = performance.now();
        await probe.ping();
        pings.push(performance.now() - startedAt);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const quiet: number[] = [];
    const quietVendor = (async () => {
      for (let n = 0; n < 10_000 && Date.now() < until; n += 1) {
        const startedAt = performance.now();
        const answer = await dryRun(small);
        quiet.push(performance.now() - startedAt);
        expect(answer.json()).toMatchObject({ count: SMALL_LOG });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await Promise.all([...hammer, pinging, quietVendor]);
    const ping = summary(pings);
    const other = summary(quiet);
    console.log(
      `dry-run hammer: ${hammered} requests (${limited} answered 429) in ${hammerForMs} ms; Redis PING p50 ${ms(ping.p50)} ms, ` +
        `p95 ${ms(ping.p95)} ms, max ${ms(ping.max)} ms (${ping.n}); the other vendor's dry runs p50 ${ms(other.p50)} ms, ` +
        `p95 ${ms(other.p95)} ms (${other.n})`,
    );
    // Generous bounds (the machine is shared). Unbounded, each of these counts held Redis for about
    // 100 ms, eight at a time: PINGs and the other vendor's dry runs waited close to a second (p95).
    expect(ping.p50).toBeLessThan(5);
    expect(ping.p95).toBeLessThan(100);
    expect(other.p95).toBeLessThan(250);
  });

  it('a vendor holds HOOKLINE_REPLAY_QUEUED_MAX replays at most and runs HOOKLINE_REPLAY_RUNNING_MAX; another vendor’s replay starts within a slice', async () => {
    const { replayQueuedMax, replayRunningMax } = t.config;
    const admin = await t.keyFor(['admin']);
    // Paced to 2 a second over 50 events: each would hold a slot for 25 s.
    const slow = { rate_per_second: 2 };
    const started: string[] = [];
    for (let n = 0; n < replayQueuedMax; n += 1) {
      const answer = await replay(paced, slow);
      expect(answer.statusCode).toBe(202);
      started.push(answer.json<{ task_id: string }>().task_id);
    }
    const refused = await replay(paced, slow);
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toMatchObject({ code: 'replay_queue_full' });
    expect(refused.json<{ error: string }>().error).toContain(
      `has ${replayQueuedMax} range replays waiting or running`,
    );
    expect(refused.headers['retry-after']).toBe('10');
    // An operator's replay counts toward the vendor it targets.
    const byOperator = await t.app.inject({
      method: 'POST',
      url: '/admin/v1/replays',
      headers: { 'x-api-key': admin },
      payload: { vendor_id: 'vendor-many', webhook_id: paced.id, since: new Date(0).toISOString(), ...slow },
    });
    expect(byOperator.statusCode).toBe(429);
    expect(byOperator.json()).toMatchObject({ code: 'replay_queue_full' });

    // The worker runs the vendor's replays, never more than its cap at once, a slice at a time.
    let runningMax = 0;
    let sampling = true;
    const sampler = (async () => {
      for (let n = 0; n < 100_000 && sampling; n += 1) {
        runningMax = Math.max(runningMax, (await t.replayQueue.held('vendor-many')).running);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await waitFor(
      async () => (await t.replayQueue.held('vendor-many')).running === Math.min(SLOTS, replayRunningMax),
      10_000,
      'the vendor’s replays running',
    );

    // The other vendor's replay, with every slot taken by the first vendor's: it starts within about
    // a slice (FIFO over every replay, it would wait for the first vendor's ten to end).
    const askedAt = Date.now();
    const other = await replay(small);
    expect(other.statusCode).toBe(202);
    const otherTask = other.json<{ task_id: string }>().task_id;
    const started_ = waitFor(
      async () => (await taskStatus(small, otherTask)) !== 'pending',
      5_000,
      'the other vendor’s replay to start',
    );
    const pings = summary(await pingsUntil(started_));
    await started_;
    const waitedMs = Date.now() - askedAt;
    await waitFor(async () => (await taskStatus(small, otherTask)) === 'success', 15_000, 'the other vendor’s replay');
    sampling = false;
    await sampler;
    console.log(
      `replay queue: the other vendor's replay started ${waitedMs} ms after it was asked for, with ${SLOTS} slots ` +
        `held by the first vendor's replays (slice ${SLICE_MS} ms); the first vendor ran ${runningMax} at most; Redis PING ` +
        `p50 ${ms(pings.p50)} ms, p95 ${ms(pings.p95)} ms meanwhile`,
    );
    expect(waitedMs).toBeLessThan(5_000);
    expect(runningMax).toBeLessThanOrEqual(replayRunningMax);
    expect(pings.p95).toBeLessThan(100);

    // A waiting replay cancelled leaves the queue at once: the vendor may start another.
    const waitingTask = started.at(-1)!;
    expect(
      (
        await t.app.inject({
          method: 'POST',
          url: `/vendors/v1/tasks/${waitingTask}/cancel`,
          headers: { 'x-api-key': paced.key },
        })
      ).statusCode,
    ).toBe(202);
    await waitFor(
      async () => (await taskStatus(paced, waitingTask)) === 'failed',
      5_000,
      'the cancelled replay to end',
    );
    const again = await replay(paced, slow);
    expect(again.statusCode).toBe(202);
    started.push(again.json<{ task_id: string }>().task_id);
    // Done: every one of them cancelled, so the worker's runs end.
    for (const taskId of started)
      await t.app.inject({ method: 'POST', url: `/admin/v1/tasks/${taskId}/cancel`, headers: { 'x-api-key': admin } });
  });
});
