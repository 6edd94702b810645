import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventLogEntry } from '../../src/store/event-log.js';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { testApp, type TestApp } from '../helpers/app.js';

/** Events in the hammering vendor's log: each count of it would read them all without a bound. */
const BIG_LOG = 20_000;
const SMALL_LOG = 100;

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
  /** A connection of the test's own, for PINGs that measure Redis's latency. */
  let probe: Redis;
  let big: { id: string; key: string };
  let small: { id: string; key: string };

  beforeAll(async () => {
    t = await testApp();
    probe = connectRedis(t.url, { connectionName: `hookline-test-probe-${t.prefix}`, maxRetriesPerRequest: 3 });
    big = await t.register('vendor-hammer', 'http://127.0.0.1:9/never');
    small = await t.register('vendor-quiet', 'http://127.0.0.1:9/never');
    for (let n = 0; n < BIG_LOG; n += 500) await t.eventLog.append(entries(big.id, 500));
    await t.eventLog.append(entries(small.id, SMALL_LOG));
  });
  afterAll(async () => {
    await probe.quit();
    await t.close();
  });

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
});
