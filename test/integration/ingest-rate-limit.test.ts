import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { readModelsProjected } from '../helpers/read-models.js';
import { TestReceiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'v-rate';
const URL = '/internal/v1/events';

const deploymentEvent = (n: number) => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
  vendor_id: VENDOR,
  data: { deployment_id: `d-${n}`, machine_id: 'm-1', status: 'STATUS_RUNNING', fail_reason: '', metadata: {} },
});

/** Waits until a new second has just begun, so a short burst stays in one rate window. */
async function startOfSecond(): Promise<void> {
  const second = Math.floor(Date.now() / 1000);
  await waitFor(() => Math.floor(Date.now() / 1000) > second, 2_000, 'the next second');
}

describe('ingest rate limit (events per second per key, not requests)', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  let receiver: TestReceiver | undefined;

  afterEach(async () => {
    await worker?.close();
    await receiver?.close();
    await t?.close();
    [t, worker, receiver] = [undefined, undefined, undefined];
  });

  const post = (app: TestApp, key: string, payload: object) =>
    app.app.inject({
      method: 'POST',
      url: URL,
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      payload: JSON.stringify(payload),
    });

  it('accepts 300 events posted one per request as fast as one client can, with the default limits, and delivers them all', async () => {
    const defaults = loadConfig({});
    t = await testApp({
      rateLimitPerSecond: defaults.rateLimitPerSecond,
      ingestRateLimitPerSecond: defaults.ingestRateLimitPerSecond,
    });
    receiver = new TestReceiver();
    await receiver.start();
    const vendorKey = await t.keyFor(['vendor'], VENDOR);
    const registered = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': vendorKey },
      payload: { event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED', callback_url: `${receiver.base}/one-by-one` },
    });
    expect(registered.statusCode).toBe(201);
    const producerKey = await t.keyFor(['events:write']);

    const events = Array.from({ length: 300 }, (_, i) => deploymentEvent(i));
    const statuses: number[] = [];
    const seconds: number[] = [];
    for (const event of events) {
      const res = await post(t, producerKey, event);
      statuses.push(res.statusCode);
      seconds.push(Math.floor(Date.now() / 1000));
    }
    const perSecond = [
      ...seconds.reduce((counts, s) => counts.set(s, (counts.get(s) ?? 0) + 1), new Map<number, number>()).values(),
    ];
    console.log(`ingest one by one: 300 requests, at most ${Math.max(...perSecond)} in one second`);
    expect(statuses.filter((s) => s !== 202)).toEqual([]);
    // The run really went past the per-key request limit, or this test would prove nothing.
    expect(Math.max(...perSecond)).toBeGreaterThan(defaults.rateLimitPerSecond);

    // The worker starts afterwards, so the producer has the process's CPU to itself while it posts.
    worker = await startTestWorker(t);
    await waitFor(
      () => new Set(receiver!.at('/one-by-one').map((r) => r.headers['webhook-id'])).size === 300,
      30_000,
      '300 deliveries',
    );
    expect(new Set(receiver.at('/one-by-one').map((r) => String(r.headers['webhook-id'])))).toEqual(
      new Set(events.map((e) => e.event_id)),
    );
  });

  it('does not count ingest requests against the per-key request limit', async () => {
    t = await testApp({ rateLimitPerSecond: 5, ingestRateLimitPerSecond: 1_000 });
    const producerKey = await t.keyFor(['events:write']);
    await startOfSecond();
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => post(t!, producerKey, deploymentEvent(i))));
    expect(answers.map((r) => r.statusCode)).toEqual(Array.from({ length: 20 }, () => 202));
  });

  it('past a small ingest limit answers 429 with Retry-After and ingests nothing of the request; a batch larger than the limit passes into an empty window', async () => {
    t = await testApp({ ingestRateLimitPerSecond: 50 });
    const producerKey = await t.keyFor(['events:write']);
    const otherKey = await t.keyFor(['events:write']);
    const batch = (from: number, count: number) => ({
      events: Array.from({ length: count }, (_, i) => deploymentEvent(from + i)),
    });
    const ingested = async (payload: { events: { event_id: string; data: { deployment_id: string } }[] }) =>
      (
        await Promise.all(
          payload.events.map(
            async (e) =>
              ((await t!.dedupe.seen([e.event_id], Date.now()))[0] ? 1 : 0) +
              ((await t!.agents.get(e.data.deployment_id)) ? 1 : 0),
          ),
        )
      ).reduce((a, b) => a + b, 0);

    await startOfSecond();
    const first = batch(0, 30);
    expect((await post(t, producerKey, first)).statusCode).toBe(202);
    const over = batch(100, 30);
    const refused = await post(t, producerKey, over);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json()).toEqual({
      error: 'Ingest rate limit of 50 events per second for this API key exceeded; retry after 1 s',
      code: 'rate_limited',
    });
    // Refused events are not counted: 20 more still fit this second, then one more does not.
    const fits = batch(200, 20);
    expect((await post(t, producerKey, fits)).statusCode).toBe(202);
    expect((await post(t, producerKey, deploymentEvent(300))).statusCode).toBe(429);
    // Each key has its own budget.
    expect((await post(t, otherKey, deploymentEvent(301))).statusCode).toBe(202);
    await readModelsProjected(t.redis, t.keys);
    expect(await ingested(over)).toBe(0);
    expect(await ingested(first)).toBe(60);

    // A single batch larger than the limit goes through into an empty window.
    await startOfSecond();
    const big = batch(400, 80);
    const passed = await post(t, producerKey, big);
    expect(passed.statusCode).toBe(202);
    expect(passed.json<{ accepted: number }>().accepted).toBe(80);
    // The window is now past the limit, so the next request waits for the next second.
    expect((await post(t, producerKey, deploymentEvent(500))).statusCode).toBe(429);
  });
});
