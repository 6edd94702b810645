import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { receiverPool } from '../helpers/receiver.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const event = (eventType: WebhookEventType, vendorId: string) => ({
  event_id: randomUUID(),
  event_type: eventType,
  vendor_id: vendorId,
  data: eventType.includes('MACHINE')
    ? { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } }
    : { deployment_id: `d-${randomUUID().slice(0, 8)}`, machine_id: 'm-1', status: 'STATUS_RUNNING', fail_reason: '', metadata: {} },
});

describe('delivery isolation, SSRF guard and sustained failures', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  const receivers = receiverPool();

  afterEach(async () => {
    await worker?.close();
    await receivers.closeAll();
    await t?.close();
  });

  const receiver = () => receivers.start();

  it('keeps healthy deliveries flowing while another endpoint hangs', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000, 1_000] });
    const hanging = await receiver();
    const healthy = await receiver();
    hanging.script('/h', 'hang');
    await t.webhooks.create('slow-vendor', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${hanging.base}/h` });
    await t.webhooks.create('good-vendor', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${healthy.base}/ok` });
    // 10 slots; each hanging attempt holds one for the 2 s timeout.
    worker = await startTestWorker(t, { workerConcurrency: 10, deliveryTimeoutMs: 2_000 });

    const HANGING = 100;
    const HEALTHY = 300;
    // Baseline: the healthy endpoint alone.
    const baselineStartMs = Date.now();
    await t.ingestor.ingest(
      Array.from({ length: HEALTHY }, () => event('EVENT_TYPE_MACHINE_CREATED', 'good-vendor')),
      'http',
    );
    await waitFor(() => healthy.requests.length === HEALTHY, 20_000, 'baseline deliveries');
    const baselineMs = Date.now() - baselineStartMs;
    healthy.requests.length = 0;

    const events = [
      ...Array.from({ length: HANGING }, () => event('EVENT_TYPE_MACHINE_CREATED', 'slow-vendor')),
      ...Array.from({ length: HEALTHY }, () => event('EVENT_TYPE_MACHINE_CREATED', 'good-vendor')),
    ];
    // Hanging ones first, so without isolation they would take every slot.
    const startMs = Date.now();
    await t.ingestor.ingest(events, 'http');
    await waitFor(() => healthy.requests.length === HEALTHY, 20_000, 'healthy deliveries');
    const elapsedMs = Date.now() - startMs;
    const rate = (HEALTHY / elapsedMs) * 1000;
    const baselineRate = (HEALTHY / baselineMs) * 1000;
    console.log(
      `isolation: ${HEALTHY} healthy deliveries in ${elapsedMs} ms (${rate.toFixed(0)}/s) beside ${HANGING} to a hanging endpoint ` +
        `(${hanging.requests.length} of those reached it); alone: ${baselineMs} ms (${baselineRate.toFixed(0)}/s); ratio ${(rate / baselineRate).toFixed(2)}`,
    );
    // Without isolation: 100 hanging attempts over 10 slots = 10 rounds × 2 s before the healthy ones.
    expect(elapsedMs).toBeLessThan(6_000);
    expect(hanging.requests.length).toBeLessThanOrEqual(10);
  });

  it('opens the circuit of an endpoint that keeps failing, then a probe closes it', async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200, 200, 200, 200] });
    const flaky = await receiver();
    flaky.script('/f', { status: 500 });
    await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${flaky.base}/f` });
    worker = await startTestWorker(t, { workerConcurrency: 5, breaker: { failureThreshold: 3, openMs: 1_000, openMsMax: 1_000 } });
    await t.ingestor.ingest(
      Array.from({ length: 5 }, () => event('EVENT_TYPE_MACHINE_CREATED', 'v')),
      'http',
    );
    await waitFor(() => worker!.breakers.openEndpoints(Date.now()).includes(flaky.base), 5_000, 'open circuit');
    const hitsWhenOpened = flaky.requests.length;
    // While open, deliveries wait in the queue instead of reaching the receiver: it goes quiet.
    const hitsWhileOpen = await quiescent(() => flaky.requests.length, 500, 2_000, 'the receiver while the circuit is open');
    expect(hitsWhileOpen).toBeLessThanOrEqual(hitsWhenOpened + 1);
    flaky.script('/f', { status: 200 });
    await waitFor(
      () => worker!.outcomes.filter((o) => o.kind === 'attempted' && o.decision === 'delivered').length === 5,
      15_000,
      'all delivered after the probe',
    );
    expect(worker.breakers.openEndpoints(Date.now())).toEqual([]);
    expect(worker.outcomes.some((o) => o.kind === 'deferred' && o.reason === 'open')).toBe(true);
  });

  it('blocks private, loopback, link-local and mapped targets with the guard on, recording ssrf_blocked', async () => {
    t = await testApp({ retryScheduleMs: [0] });
    const target = await receiver();
    const port = new URL(target.base).port;
    const urls = [
      `http://127.0.0.1:${port}/a`,
      'http://10.0.0.1/b',
      'http://169.254.169.254/latest/meta-data',
      `http://[::1]:${port}/c`,
      `http://[::ffff:127.0.0.1]:${port}/d`,
      `http://localhost:${port}/e`,
    ];
    const ids: string[] = [];
    for (const [i, url] of urls.entries()) {
      const created = await t.webhooks.create('ssrf-vendor', { eventType: WEBHOOK_EVENT_TYPES[i]!, callbackUrl: url });
      expect(created.ok).toBe(true);
      if (created.ok) ids.push(created.webhook.id);
    }
    worker = await startTestWorker(t, { allowPrivateTargets: false });
    await t.ingestor.ingest(
      WEBHOOK_EVENT_TYPES.map((type) => event(type, 'ssrf-vendor')),
      'http',
    );
    for (const id of ids) {
      const [delivery] = await waitFor(
        async () => {
          const list = await t!.deliveryLog.recent(id, 5);
          return list[0]?.status === 'dead' && list;
        },
        10_000,
        `blocked delivery of ${id}`,
      );
      expect(delivery?.lastOutcome).toBe('ssrf_blocked');
    }
    expect(target.requests).toHaveLength(0);
  });

  it('disables a webhook whose every attempt failed for the sustained-failure window', async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 300, 300, 300] });
    const down = await receiver();
    down.script('/x', { status: 500 });
    const created = await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${down.base}/x` });
    if (!created.ok) throw new Error('setup');
    worker = await startTestWorker(t, { sustainedFailureWindowMs: 700, breaker: { failureThreshold: 1_000 } });
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(async () => (await t!.webhooks.getById(created.webhook.id))?.disabled?.reason === 'failing', 10_000, 'disabled for failing');
    // A success clears the failure run: re-enable, recover, and the webhook stays enabled.
    down.script('/x', { status: 200 });
    await t.webhooks.update('v', created.webhook.id, { enabled: true });
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(() => worker!.outcomes.some((o) => o.kind === 'attempted' && o.decision === 'delivered'), 10_000, 'delivered after re-enable');
    expect((await t.webhooks.getById(created.webhook.id))?.disabled).toBeUndefined();
    expect(await t.redis.exists(t.keys.deliveries.failingSince(created.webhook.id))).toBe(0);
  });

  it('starts the run of failures over on re-enable, and a paused webhook’s held deliveries do not start it', async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200, 200, 200, 200, 200, 200] });
    const down = await receiver();
    down.script('/x', { status: 503 });
    const created = await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${down.base}/x` });
    if (!created.ok) throw new Error('setup');
    const id = created.webhook.id;
    await t.webhooks.update('v', id, { enabled: false });
    worker = await startTestWorker(t, { sustainedFailureWindowMs: 700, breaker: { failureThreshold: 1_000 } });
    // Paused: its delivery is held without being sent, and that starts no failure run.
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(() => worker!.outcomes.some((o) => o.kind === 'deferred' && o.reason === 'webhook_paused'), 10_000, 'held while paused');
    expect(await t.redis.exists(t.keys.deliveries.failingSince(id))).toBe(0);
    expect(down.requests).toHaveLength(0);

    // A failure run older than the window, left from before a pause, ends with the re-enable: the
    // held delivery, sent now, starts a run of its own.
    await t.redis.set(t.keys.deliveries.failingSince(id), Date.now() - 60_000);
    const enabledAtMs = Date.now();
    await t.webhooks.update('v', id, { enabled: true });
    const since = await t.redis.get(t.keys.deliveries.failingSince(id));
    expect(since === null || Number(since) >= enabledAtMs).toBe(true);
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(() => down.requests.length >= 1, 10_000, 'first attempt after re-enable');
    await waitFor(() => worker!.outcomes.some((o) => o.kind === 'attempted' && o.outcome === 'http_5xx'), 10_000, 'attempt recorded');
    // One 503 right after re-enabling does not disable it again; only a failure run of 700 ms does.
    expect((await t.webhooks.getById(id))?.disabled).toBeUndefined();
    await waitFor(async () => (await t!.webhooks.getById(id))?.disabled?.reason === 'failing', 10_000, 'disabled after the window');
  });
});
