import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { redisKeys } from '../../src/store/keys.js';
import { RedisSendRate } from '../../src/store/send-rate.js';
import { takeSendToken, type BucketState } from '../../src/domain/rate-limit.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { receiverPool, type TestReceiver } from '../helpers/receiver.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { deliveryLogCaughtUp, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

/** The most arrivals in any window [a, a + windowMs) (the busiest starts at an arrival). */
function busiestWindow(arrivalsMs: readonly number[], windowMs: number): number {
  const sorted = [...arrivalsMs].sort((a, b) => a - b);
  let most = 0;
  let end = 0;
  for (let start = 0; start < sorted.length; start += 1) {
    while (end < sorted.length && sorted[end]! < sorted[start]! + windowMs) end += 1;
    most = Math.max(most, end - start);
  }
  return most;
}

const eventIdOf = (body: string) => (JSON.parse(body) as { event_id: string }).event_id;

describe('per-webhook rate limit', () => {
  let t: TestApp | undefined;
  let redis: TestRedis | undefined;
  const workers: TestWorker[] = [];
  const receivers = receiverPool();

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    await receivers.closeAll();
    await t?.close();
    await redis?.cleanup();
    t = undefined;
    redis = undefined;
  });

  it('the Lua bucket answers as the pure function does, step for step (fixed clock)', async () => {
    redis = testRedis();
    const limiter = new RedisSendRate(redis.redis, redisKeys(redis.prefix));
    const T0 = 1_764_000_000_000_000;
    const cases: { rate: number; times: number[]; random: number }[] = [
      { rate: 4, times: [0, 0, 0, 0, 0, 0, 250_000, 250_001, 900_000], random: 0.5 },
      { rate: 3, times: [0, 1, 2, 3, 333_333, 333_334, 10_000_000, 10_000_000], random: 0.25 },
      { rate: 1, times: Array.from({ length: 14 }, (_, i) => i * 1_000), random: 0.75 },
      { rate: 10_000, times: Array.from({ length: 10_050 }, () => 5), random: 0.1 },
    ];
    for (const { rate, times, random } of cases) {
      const webhookId = randomUUID();
      let state: BucketState | undefined;
      const expected: number[] = [];
      const got: number[] = [];
      for (const t of times) {
        const take = takeSendToken(state, rate, T0 + t, random);
        state = take.state;
        expected.push(take.sent ? 0 : take.retryInUs);
        got.push(await limiter.takeAt(webhookId, rate, T0 + t, random));
      }
      expect({ rate, answers: got }).toEqual({ rate, answers: expected });
    }
  });

  it('two workers together keep a limited webhook within its limit; deferrals are no attempts; an unlimited webhook beside it keeps its pace', async () => {
    // A short schedule: were a deferral counted as an attempt, deliveries would show attempts > 1 and
    // dead-letter after three.
    t = await testApp({ retryScheduleMs: [0, 1_000, 1_000] });
    const LIMIT = 20;
    const EVENTS = 200;
    const limitedReceiver = await receivers.start();
    const freeReceiver = await receivers.start();
    const limited = await t.register('limited', `${limitedReceiver.base}/in`, { rate_limit_per_second: LIMIT });
    await t.register('free', `${freeReceiver.base}/in`);
    workers.push(
      await startTestWorker(t, { workerConcurrency: 20 }),
      await startTestWorker(t, { workerConcurrency: 20 }),
    );

    const startMs = Date.now();
    // Interleaved, so both webhooks' deliveries share every batch.
    const events = Array.from({ length: EVENTS }, () => [machineEvent('limited'), machineEvent('free')]).flat();
    await t.ingestor.ingest(events, 'http');
    await waitFor(() => freeReceiver.requests.length >= EVENTS, 20_000, 'the unlimited webhook’s deliveries');
    const freeDoneMs = Date.now() - startMs;
    const limitedAtFreeDone = limitedReceiver.requests.length;
    await waitFor(() => limitedReceiver.requests.length >= EVENTS, 30_000, 'the limited webhook’s deliveries');
    // Recorded too (the receiver may see a request a moment before its worker records the answer).
    const attemptsOf = () =>
      workers.flatMap((w) => w.outcomes).filter((o) => o.kind === 'attempted' && o.job.webhookId === limited.id);
    await waitFor(() => attemptsOf().length >= EVENTS, 5_000, 'the limited webhook’s attempts recorded');
    const arrivals = limitedReceiver.requests.map((r) => r.atMs);
    const firstMs = Math.min(...arrivals);
    const spanMs = Math.max(...arrivals) - firstMs;
    const busiest = busiestWindow(arrivals, 1_000);
    const deferred = workers
      .flatMap((w) => w.outcomes)
      .filter((o) => o.kind === 'deferred' && o.reason === 'rate_limited');
    const attempted = attemptsOf();
    console.log(
      `rate limit ${LIMIT}/s, ${EVENTS} events, 2 workers: delivered over ${spanMs} ms; busiest 1 s window ${busiest}; ` +
        `${deferred.length} deferrals (rate_limited), ${attempted.length} attempts; ` +
        `the unlimited webhook's ${EVENTS} in ${freeDoneMs} ms (the limited one had ${limitedAtFreeDone} by then)`,
    );

    // Exactly once each, none dead-lettered, and one attempt per delivery: deferrals are not attempts.
    const ids = limitedReceiver.requests.map((r) => eventIdOf(r.body));
    expect(new Set(ids).size).toBe(EVENTS);
    expect(ids).toHaveLength(EVENTS);
    expect(attempted).toHaveLength(EVENTS);
    await deliveryLogCaughtUp(t);
    const deliveries = await t.deliveryLog.recent(limited.id, 1_000);
    expect(deliveries).toHaveLength(EVENTS);
    expect(deliveries.every((d) => d.status === 'delivered' && d.attempts === 1)).toBe(true);
    expect(await t.deliveryLog.deadLetters(limited.id, 10)).toEqual([]);
    expect(deferred.length).toBeGreaterThan(0);

    // What the limit promises (20 in any second, shared by both workers), asserted on the receiver's
    // arrival times with two requests of slack (an arrival may come late after its send was allowed,
    // and a later one early): the busiest window of one second holds at most the limit. 200 at no
    // more than 20 a second take 9 s at least (10 windows); and the limit is used, not wasted: under 15 s.
    expect(busiest).toBeLessThanOrEqual(LIMIT + 2);
    expect(spanMs).toBeGreaterThanOrEqual(((EVENTS - LIMIT - 2) * 1_000) / LIMIT);
    expect(spanMs).toBeLessThan(15_000);
    // The unlimited webhook is done before the limited one is half way.
    expect(limitedAtFreeDone).toBeLessThan(EVENTS / 2);

    // The stats show the limit.
    const stats = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${limited.id}/stats`,
      headers: { 'x-api-key': limited.key },
    });
    expect(stats.statusCode).toBe(200);
    expect(stats.json()).toMatchObject({
      rate_limit_per_second: LIMIT,
      send_rate_per_second: expect.any(Number) as number,
    });
  });

  it('PATCH rate_limit_per_second null lifts the limit for the deliveries already waiting', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000, 1_000] });
    const receiver = await receivers.start();
    const webhook = await t.register('slow', `${receiver.base}/in`, { rate_limit_per_second: 1 });
    workers.push(await startTestWorker(t));
    const EVENTS = 40;
    const startMs = Date.now();
    await t.ingestor.ingest(
      Array.from({ length: EVENTS }, () => machineEvent('slow')),
      'http',
    );
    // Limited: one a second.
    await waitFor(() => receiver.requests.length >= 2, 5_000, 'the first two deliveries');
    expect(receiver.requests.length).toBeLessThanOrEqual(3);
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
      payload: { rate_limit_per_second: null },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ rate_limit_per_second: null });
    // At 1/s the rest would take 38 s more; deferred deliveries come back within the 10 s horizon.
    await waitFor(() => receiver.requests.length >= EVENTS, 20_000, 'the rest, unlimited');
    const elapsedMs = Date.now() - startMs;
    console.log(`rate limit lifted: ${EVENTS} delivered ${elapsedMs} ms after ingest (at 1/s: ${EVENTS - 1} s)`);
    expect(elapsedMs).toBeLessThan(20_000);
    // The receiver may see the last request a moment before its worker records the answer: wait until
    // no delivery is still pending, then every one must be delivered at its first attempt.
    const deliveries = await waitFor(
      async () => {
        const recent = await t!.deliveryLog.recent(webhook.id, 100);
        return recent.length === EVENTS && recent.every((d) => d.status !== 'pending') && recent;
      },
      5_000,
      'every delivery recorded',
    );
    expect(
      deliveries.filter((d) => !(d.status === 'delivered' && d.attempts === 1)).map((d) => `${d.status}/${d.attempts}`),
    ).toEqual([]);
  });

  it('test events obey the limit too', async () => {
    t = await testApp();
    const receiver: TestReceiver = await receivers.start();
    const webhook = await t.register('tests', `${receiver.base}/in`, { rate_limit_per_second: 1 });
    workers.push(await startTestWorker(t));
    for (let i = 0; i < 3; i += 1) {
      const res = await t.app.inject({
        method: 'POST',
        url: `/vendors/v1/webhooks/${webhook.id}/test`,
        headers: { 'x-api-key': webhook.key },
      });
      expect(res.statusCode).toBe(202);
    }
    await waitFor(() => receiver.requests.length >= 3, 10_000, 'three test events');
    const gaps = receiver.requests.slice(1).map((r, i) => r.atMs - receiver.requests[i]!.atMs);
    console.log(`test events at 1/s: gaps ${gaps.join(', ')} ms`);
    // One token a second, burst 1: 50 ms of slack for the time from a token to the arrival.
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(950);
  });

  it('replays of dead letters obey the limit too', async () => {
    // One attempt each: the three fail (500) and are dead-lettered; their replays are answered 200.
    t = await testApp({ retryScheduleMs: [0] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 }, { status: 500 }, { status: 500 }, { status: 200 });
    const webhook = await t.register('replays', `${receiver.base}/in`, { rate_limit_per_second: 1 });
    workers.push(await startTestWorker(t));
    await t.ingestor.ingest(
      Array.from({ length: 3 }, () => machineEvent('replays')),
      'http',
    );
    await waitFor(
      async () => (await t!.deliveryLog.deadLetters(webhook.id, 10)).length === 3,
      10_000,
      'three dead letters',
    );
    const replayed = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/dead-letters/replay`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(replayed.statusCode).toBe(202);
    await waitFor(() => receiver.requests.length >= 6, 10_000, 'three replays');
    const replays = receiver.requests.slice(3);
    const gaps = replays.slice(1).map((r, i) => r.atMs - replays[i]!.atMs);
    console.log(`replays at 1/s: gaps ${gaps.join(', ')} ms`);
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(950);
  });

  it('validates rate_limit_per_second on POST and PATCH, naming the field', async () => {
    t = await testApp();
    const key = await t.keyFor(['vendor'], 'v-api');
    const post = (body: object) =>
      t!.app.inject({ method: 'POST', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key }, payload: body });
    const patch = (id: string, body: object, headers: Record<string, string> = { 'x-api-key': key }) =>
      t!.app.inject({ method: 'PATCH', url: `/vendors/v1/webhooks/${id}`, headers, payload: body });
    const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://vendor.example.com/in' };
    const created = await post({ ...base, rate_limit_per_second: 20 });
    expect(created.statusCode).toBe(201);
    const id = created.json<{ webhook_id: string }>().webhook_id;
    const listed = async () =>
      (await t!.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } })).json<{
        webhooks: { rate_limit_per_second: unknown }[];
      }>().webhooks[0]!.rate_limit_per_second;
    expect(await listed()).toBe(20);

    for (const bad of [0, -1, 1.5, 'x', 10_001, null]) {
      const onPost = await post({ ...base, event_type: 'EVENT_TYPE_MACHINE_UPDATED', rate_limit_per_second: bad });
      expect({ bad, status: onPost.statusCode, body: onPost.json<{ error: string }>() }).toMatchObject({
        bad,
        status: 400,
        body: { error: 'Invalid request body: rate_limit_per_second must be an integer from 1 to 10000' },
      });
      if (bad === null) continue;
      const onPatch = await patch(id, { rate_limit_per_second: bad });
      expect({ bad, status: onPatch.statusCode, error: onPatch.json<{ error: string }>().error }).toEqual({
        bad,
        status: 400,
        error: 'Invalid request body: rate_limit_per_second must be an integer from 1 to 10000',
      });
    }
    expect(await listed()).toBe(20);

    const changed = await patch(id, { rate_limit_per_second: 10_000 });
    expect(changed.statusCode).toBe(200);
    expect(changed.json()).toMatchObject({ rate_limit_per_second: 10_000 });
    // A PATCH of something else keeps the limit; null removes it.
    expect((await patch(id, { enabled: true })).json()).toMatchObject({ rate_limit_per_second: 10_000 });
    expect((await patch(id, { rate_limit_per_second: null })).json()).toMatchObject({ rate_limit_per_second: null });
    expect(await listed()).toBeNull();
    // Auth and not-found stay as for any PATCH.
    expect((await patch(id, { rate_limit_per_second: 5 }, {})).statusCode).toBe(401);
    expect((await patch(randomUUID(), { rate_limit_per_second: 5 })).statusCode).toBe(404);
  });
});
