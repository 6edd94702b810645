import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { FinishedOutcome } from '../../src/delivery/attempt.js';
import {
  LATENCY_BOUNDS_MS,
  latencyBucket,
  RedisEndpointStats,
  type AttemptSample,
} from '../../src/store/endpoint-stats.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { receiverPool } from '../helpers/receiver.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;

interface StatsWindowBody {
  attempts: number;
  delivered: number;
  failed: number;
  success_rate: number | null;
  p50_ms: number | null;
  p95_ms: number | null;
}

interface StatsBody {
  webhook_id: string;
  circuit: 'closed' | 'open' | 'half_open';
  last_attempt: { attempted_at: string; outcome: string; status_code: number | null; duration_ms: number } | null;
  windows: { hour: StatsWindowBody; day: StatsWindowBody };
  minutes: { minute: string; delivered: number; failed: number }[];
}

/** The bounds of the latency bucket that holds `ms`. */
function bucketBounds(ms: number): [number, number] {
  const i = latencyBucket(ms);
  return [i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!, LATENCY_BOUNDS_MS[i] ?? Infinity];
}

/** The `q` quantile by nearest rank. */
function nearestRank(samples: readonly number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

describe('endpoint stats store (real Redis)', () => {
  let t: TestRedis;
  let keys: RedisKeys;
  const stores: RedisEndpointStats[] = [];
  const store = () => {
    const made = new RedisEndpointStats(t.redis, keys);
    stores.push(made);
    return made;
  };

  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await t.cleanup();
  });

  const setUp = () => {
    t = testRedis();
    keys = redisKeys(t.prefix);
  };

  /** An attempt that ended at `endedAtMs`. */
  const sample = (
    webhookId: string,
    outcome: string,
    endedAtMs: number,
    durationMs: number,
    statusCode?: number,
  ): AttemptSample => ({
    webhookId,
    outcome,
    statusCode,
    startedAtMs: endedAtMs - Math.round(durationMs),
    endedAtMs,
    durationMs,
  });

  /** Every stats key of one webhook (SCAN, never KEYS). */
  async function statsKeys(webhookId: string): Promise<string[]> {
    const pattern = keys.endpointStats.last(webhookId).replace(/last$/, '*');
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await t.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      found.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    return found;
  }

  it('counts sent attempts per minute, leaves out those never sent, and rolls the hours into the day', async () => {
    setUp();
    const stats = store();
    const id = randomUUID();
    const now = Date.now();
    stats.observe(sample(id, 'delivered', now - 5 * MINUTE_MS, 20, 200));
    stats.observe(sample(id, 'http_5xx', now - 5 * MINUTE_MS, 120, 503));
    stats.observe(sample(id, 'timeout', now, 15_000));
    stats.observe(sample(id, 'connect', now, 3));
    // Never sent: held back by an open circuit, or dead-lettered by a disabled webhook.
    stats.observe(sample(id, 'circuit_open', now + 1, 0));
    stats.observe(sample(id, 'webhook_disabled', now + 1, 0));
    stats.observe(sample(id, 'delivered', now - 2 * HOUR_MS, 40, 204));
    // Older than any window: its keys expire as they are written.
    stats.observe(sample(id, 'delivered', now - 30 * HOUR_MS, 40, 200));
    await stats.flush();

    const read = await store().read(id, now);
    expect(read.hour).toMatchObject({ attempts: 4, delivered: 1, failed: 3, successRate: 0.25 });
    // Timed: 20 ms, 120 ms and the 15 s timeout; the connect error has no response time. The median
    // lies in the bucket of 120 ms, (100, 250].
    expect(read.hour.p50Ms).toBeGreaterThan(100);
    expect(read.hour.p50Ms).toBeLessThanOrEqual(250);
    expect(read.hour.p95Ms).toBeGreaterThan(10_000);
    expect(read.minutes).toHaveLength(60);
    expect(read.minutes.at(-6)).toMatchObject({ delivered: 1, failed: 1 });
    expect(read.minutes.at(-1)).toMatchObject({ delivered: 0, failed: 2 });
    expect(read.minutes.at(-1)!.atMs).toBe(Math.floor(now / MINUTE_MS) * MINUTE_MS);
    expect(read.minutes.reduce((sum, m) => sum + m.delivered + m.failed, 0)).toBe(4);
    expect(read.day).toMatchObject({ attempts: 5, delivered: 2, failed: 3, successRate: 0.4 });
    expect(read.last).toEqual({ atMs: now - 3, outcome: 'connect', statusCode: undefined, durationMs: 3 });
    // The send rate: attempts sent in the last full minute ÷ 60. Read now, that is the minute before
    // this one (none); read a minute later, this one (the timeout and the connect error).
    expect(read.sendRatePerSecond).toBe(0);
    expect((await store().read(id, now + MINUTE_MS)).sendRatePerSecond).toBe(2 / 60);

    // A webhook nobody attempted.
    const none = await stats.read(randomUUID(), now);
    expect(none.hour).toEqual({
      attempts: 0,
      delivered: 0,
      failed: 0,
      successRate: undefined,
      p50Ms: undefined,
      p95Ms: undefined,
    });
    expect(none.day.attempts).toBe(0);
    expect(none.last).toBeUndefined();
    expect(none.minutes.every((m) => m.delivered === 0 && m.failed === 0)).toBe(true);
  });

  it('keeps the newest attempt, whichever worker flushes last; and adds up the counts of every worker', async () => {
    setUp();
    const [first, second] = [store(), store()];
    const id = randomUUID();
    const now = Date.now();
    first.observe(sample(id, 'delivered', now, 10, 200));
    second.observe(sample(id, 'http_4xx', now - 1_000, 10, 404));
    await first.flush();
    await second.flush();
    const read = await first.read(id, now);
    expect(read.last).toMatchObject({ outcome: 'delivered', statusCode: 200 });
    expect(read.hour).toMatchObject({ attempts: 2, delivered: 1, failed: 1 });
  });

  it('bounds a webhook’s memory: a day with attempts every minute costs the figure docs/delivery-semantics.md states', async () => {
    setUp();
    const stats = store();
    const now = Date.now();
    const firstMinute = Math.floor(now / MINUTE_MS) - 25 * 60;
    // The worst case: every minute of 25 hours has both outcomes and an attempt in every latency bucket.
    const worst = randomUUID();
    const durations = [...LATENCY_BOUNDS_MS, 60_000];
    // A steady webhook: every minute 30 deliveries answered within 25 to 100 ms.
    const steady = randomUUID();
    for (let minute = firstMinute; minute * MINUTE_MS <= now; minute += 1) {
      const endedAtMs = minute * MINUTE_MS;
      for (const ms of durations) stats.observe(sample(worst, 'delivered', endedAtMs, ms, 200));
      stats.observe(sample(worst, 'http_5xx', endedAtMs, 30, 500));
      stats.observe(sample(worst, 'connect', endedAtMs, 1));
      for (let i = 0; i < 30; i += 1) stats.observe(sample(steady, 'delivered', endedAtMs, 30 + (i % 2) * 40, 200));
    }
    await stats.flush();

    const bytesOf = async (id: string) => {
      const found = await statsKeys(id);
      const sizes = await Promise.all(found.map((key) => t.redis.memory('USAGE', key, 'SAMPLES', 0)));
      const encodings = await Promise.all(
        found.filter((key) => !key.endsWith(':last')).map((key) => t.redis.object('ENCODING', key)),
      );
      const kinds = (kind: string) => found.filter((key) => key.includes(`:stats:${kind}:`)).length;
      return {
        keys: found.length,
        slots: kinds('s'),
        quarters: kinds('q'),
        bytes: sizes.reduce<number>((sum, n) => sum + (n ?? 0), 0),
        encodings: new Set(encodings),
      };
    };
    const [worstCost, steadyCost] = await Promise.all([bytesOf(worst), bytesOf(steady)]);
    console.log(
      `endpoint stats memory per webhook, a full day: worst case ${worstCost.bytes} B in ${worstCost.keys} keys; steady ${steadyCost.bytes} B in ${steadyCost.keys} keys`,
    );
    // Past slots and quarter-days expired as they were written: 7 or 8 slots, 5 or 6 quarters and the last attempt remain.
    expect([7, 8]).toContain(worstCost.slots);
    expect([5, 6]).toContain(worstCost.quarters);
    expect(worstCost.keys).toBe(worstCost.slots + worstCost.quarters + 1);
    // Every hash stays a compact listpack (at most 90 fields, below Redis's default of 128).
    expect([...worstCost.encodings]).toEqual(['listpack']);
    expect(worstCost.bytes).toBeLessThanOrEqual(8 * 1024);
    expect(steadyCost.bytes).toBeLessThanOrEqual(4 * 1024);
    // And what was counted is all there: the last hour's 60 minutes, and the day's from the start of the hour 24 hours ago.
    const read = await stats.read(worst, now);
    const nowMinute = Math.floor(now / MINUTE_MS);
    expect(read.hour.attempts).toBe(60 * 15);
    expect(read.day.attempts).toBe((nowMinute - (Math.floor(nowMinute / 60) - 24) * 60 + 1) * 15);
  });
});

describe('GET /vendors/v1/webhooks/{webhook_id}/stats (real worker, real receivers)', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  const receivers = receiverPool();

  afterEach(async () => {
    await worker?.close();
    worker = undefined;
    await receivers.closeAll();
    await t?.close();
    t = undefined;
  });

  const getStats = async (webhookId: string, headers: Record<string, string>) => {
    const res = await t!.app.inject({ method: 'GET', url: `/vendors/v1/webhooks/${webhookId}/stats`, headers });
    return { status: res.statusCode, body: res.json<StatsBody & { code?: string }>() };
  };

  it('reports a worker’s real attempts: counts, success rate, response times within the bucket of the real ones, the last attempt and the circuit', async () => {
    // One attempt per delivery: a 500 dead-letters at once, so the counts are known.
    t = await testApp({ retryScheduleMs: [0] });
    const mixed = await receivers.start();
    const down = await receivers.start();
    // Every third answers 500, the others 200, half of those after 300 ms (the order requests arrive in).
    mixed.script(
      '/mixed',
      ...Array.from({ length: 30 }, (_, i) =>
        i % 3 === 0 ? { status: 500 } : i % 3 === 1 ? { status: 200 } : { status: 200, delayMs: 300 },
      ),
    );
    down.script('/down', { status: 500 });
    const a = await t.webhooks.create('v-stats', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${mixed.base}/mixed`,
    });
    const b = await t.webhooks.create('v-stats', {
      eventType: 'EVENT_TYPE_MACHINE_UPDATED',
      callbackUrl: `${down.base}/down`,
    });
    if (!a.ok || !b.ok) throw new Error('webhooks not created');
    const [mixedId, downId] = [a.webhook.id, b.webhook.id];
    const key = { 'x-api-key': await t.keyFor(['vendor'], 'v-stats') };
    const otherVendor = { 'x-api-key': await t.keyFor(['vendor'], 'v-other') };
    worker = await startTestWorker(t);
    await t.ingestor.ingest(
      [
        ...Array.from({ length: 30 }, () => machineEvent('v-stats', 'EVENT_TYPE_MACHINE_CREATED')),
        ...Array.from({ length: 10 }, () => machineEvent('v-stats', 'EVENT_TYPE_MACHINE_UPDATED')),
      ],
      'http',
    );
    const attemptsOf = (webhookId: string) =>
      worker!.outcomes.filter(
        (o): o is Extract<FinishedOutcome, { kind: 'attempted' }> =>
          o.kind === 'attempted' && o.job.webhookId === webhookId,
      );
    await waitFor(() => attemptsOf(mixedId).length === 30, 20_000, 'every delivery to the mixed receiver attempted');
    // Workers write their counts once a second.
    const stats = await waitFor(
      async () => {
        const res = await getStats(mixedId, key);
        return res.body.windows.hour.attempts === 30 && res;
      },
      5_000,
      'the stats to count 30 attempts',
    );
    expect(stats.status).toBe(200);
    const body = stats.body;
    console.log(`endpoint stats: mixed receiver ${JSON.stringify(body.windows.hour)}`);
    expect(body.webhook_id).toBe(mixedId);
    expect(body.windows.hour).toMatchObject({ attempts: 30, delivered: 20, failed: 10, success_rate: 0.6667 });
    expect(body.windows.day).toEqual(body.windows.hour);
    // The percentiles lie in the bucket of the true ones, from the durations the worker measured.
    const durations = attemptsOf(mixedId).map((o) => o.durationMs);
    for (const [q, estimate] of [
      [0.5, body.windows.hour.p50_ms],
      [0.95, body.windows.hour.p95_ms],
    ] as const) {
      const [lower, upper] = bucketBounds(nearestRank(durations, q));
      expect({ q, estimate: Math.min(upper, Math.max(lower, estimate!)) }).toEqual({ q, estimate });
    }
    // A third of the attempts waited 300 ms or more: the 95th percentile is past the (100, 250] bucket.
    expect(body.windows.hour.p95_ms).toBeGreaterThan(250);
    // The last 60 minutes, oldest first, the current one last; they hold every attempt.
    expect(body.minutes).toHaveLength(60);
    const minuteTimes = body.minutes.map((m) => Date.parse(m.minute));
    expect(minuteTimes.every((ms, i) => i === 0 || ms - minuteTimes[i - 1]! === MINUTE_MS)).toBe(true);
    expect(minuteTimes.at(-1)).toBe(Math.floor(Date.now() / MINUTE_MS) * MINUTE_MS);
    expect(body.minutes.reduce((sum, m) => sum + m.delivered, 0)).toBe(20);
    expect(body.minutes.reduce((sum, m) => sum + m.failed, 0)).toBe(10);
    // The last attempt is the one that started last (several may start in the same millisecond).
    const newestStart = Math.max(...attemptsOf(mixedId).map((o) => o.startedAtMs));
    const newest = attemptsOf(mixedId).filter((o) => o.startedAtMs === newestStart);
    expect(body.last_attempt?.attempted_at).toBe(new Date(newestStart).toISOString());
    expect(
      newest.map((o) => ({
        outcome: o.outcome,
        status_code: o.statusCode ?? null,
        duration_ms: Math.round(o.durationMs),
      })),
    ).toContainEqual({
      outcome: body.last_attempt?.outcome,
      status_code: body.last_attempt?.status_code,
      duration_ms: body.last_attempt?.duration_ms,
    });
    expect(body.circuit).toBe('closed');

    // The receiver that answers 500 only: its circuit opens after five failures in a row.
    await waitFor(
      async () => (await getStats(downId, key)).body.circuit === 'open',
      10_000,
      'the failing endpoint’s circuit to open',
    );
    const sent = await quiescent(() => down.requests.length, 1_000, 10_000, 'requests to the failing receiver');
    const failing = await waitFor(
      async () => {
        const res = await getStats(downId, key);
        return res.body.windows.hour.attempts === sent && res.body;
      },
      5_000,
      `the stats to count ${sent} attempts`,
    );
    console.log(`endpoint stats: failing receiver got ${sent} requests; ${JSON.stringify(failing.windows.hour)}`);
    expect(sent).toBeGreaterThanOrEqual(5);
    expect(failing.windows.hour).toMatchObject({ attempts: sent, delivered: 0, failed: sent, success_rate: 0 });
    expect(failing.last_attempt).toMatchObject({ outcome: 'http_5xx', status_code: 500 });

    // Another vendor's key sees no such webhook.
    const foreign = await getStats(mixedId, otherVendor);
    expect(foreign.status).toBe(404);
    expect(foreign.body.code).toBe('webhook_not_found');
  });

  it('answers zeros for a webhook without attempts; 400 for a bad id or parameter, 401 without a valid key, 403 without the role, 404 for an unknown id', async () => {
    t = await testApp();
    const created = await t.webhooks.create('v-stats', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'http://127.0.0.1:9/quiet',
    });
    if (!created.ok) throw new Error('webhook not created');
    const id = created.webhook.id;
    const key = { 'x-api-key': await t.keyFor(['vendor'], 'v-stats') };

    const empty = await getStats(id.toUpperCase(), key);
    expect(empty.status).toBe(200);
    const zero = { attempts: 0, delivered: 0, failed: 0, success_rate: null, p50_ms: null, p95_ms: null };
    expect(empty.body).toMatchObject({
      webhook_id: id,
      circuit: 'closed',
      last_attempt: null,
      windows: { hour: zero, day: zero },
      rate_limit_per_second: null,
      send_rate_per_second: 0,
    });
    expect(empty.body.minutes).toHaveLength(60);
    expect(empty.body.minutes.every((m) => m.delivered === 0 && m.failed === 0)).toBe(true);

    const bad = await getStats('not-a-uuid', key);
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe('invalid_webhook_id');
    const unknownParameter = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${id}/stats?window=week`,
      headers: key,
    });
    expect(unknownParameter.statusCode).toBe(400);
    expect(unknownParameter.json<{ error: string }>().error).toContain('unknown parameter "window"');
    const unknown = await getStats(randomUUID(), key);
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('webhook_not_found');

    const anonymous = await getStats(id, {});
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.code).toBe('unauthorized');
    expect((await getStats(id, { 'x-api-key': 'hk_not-a-real-key' })).status).toBe(401);
    const machinesOnly = await getStats(id, { 'x-api-key': await t.keyFor(['machines:read']) });
    expect(machinesOnly.status).toBe(403);
    expect(machinesOnly.body.code).toBe('forbidden');
  });
});
