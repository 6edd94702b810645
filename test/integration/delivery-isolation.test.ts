import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { endpointKey } from '../../src/domain/endpoint.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { receiverPool, type TestReceiver } from '../helpers/receiver.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const event = (eventType: WebhookEventType, vendorId: string) => ({
  event_id: randomUUID(),
  event_type: eventType,
  vendor_id: vendorId,
  data: eventType.includes('MACHINE')
    ? { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } }
    : {
        deployment_id: `d-${randomUUID().slice(0, 8)}`,
        machine_id: 'm-1',
        status: 'STATUS_RUNNING',
        fail_reason: '',
        metadata: {},
      },
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
    await t.webhooks.create('slow-vendor', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${hanging.base}/h`,
    });
    await t.webhooks.create('good-vendor', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${healthy.base}/ok`,
    });
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
    worker = await startTestWorker(t, {
      workerConcurrency: 5,
      breaker: { failureThreshold: 3, openMs: 1_000, openMsMax: 1_000 },
    });
    await t.ingestor.ingest(
      Array.from({ length: 5 }, () => event('EVENT_TYPE_MACHINE_CREATED', 'v')),
      'http',
    );
    await waitFor(
      () => worker!.breakers.openEndpoints(Date.now()).includes(endpointKey('v', flaky.base)),
      5_000,
      'open circuit',
    );
    const hitsWhenOpened = flaky.requests.length;
    // While open, deliveries wait in the queue instead of reaching the receiver: it goes quiet.
    const hitsWhileOpen = await quiescent(
      () => flaky.requests.length,
      500,
      2_000,
      'the receiver while the circuit is open',
    );
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

  it('a delivery’s last attempt is sent through an open circuit: a path that answers is never dead-lettered unsent', async () => {
    // One vendor, two webhooks on one origin: /down answers 503 and keeps its circuit open (an
    // event every 0.5 s, failed probes doubling the open period), /ok answers 200. With a short
    // schedule, every /ok delivery's attempts come due while the circuit is open; the last one
    // is sent all the same, as the probe, and its answer closes the circuit for both paths.
    t = await testApp({ retryScheduleMs: [0, 2_000, 4_000] });
    const origin = await receiver();
    origin.script('/down', { status: 503 });
    const downHook = await t.register('v', `${origin.base}/down`);
    const ok = await t.register('v', `${origin.base}/ok`, { event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED' });
    worker = await startTestWorker(t, { breaker: { openMs: 2_000, openMsMax: 16_000 } });
    const ingested = async (type: WebhookEventType) => {
      const e = event(type, 'v');
      expect(await t!.ingestor.ingest([e], 'http')).toMatchObject([{ status: 'accepted', deliveries: 1 }]);
      return e.event_id;
    };
    const down = () => ingested('EVENT_TYPE_MACHINE_CREATED');
    for (let i = 0; i < 6; i++) await down();
    await waitFor(
      () => worker!.breakers.openEndpoints(Date.now()).includes(endpointKey('v', origin.base)),
      5_000,
      'the origin’s circuit open',
    );
    // For 10 s: /down an event every 0.5 s, /ok one every second.
    const okEvents: string[] = [];
    for (let tick = 0; tick < 20; tick++) {
      await down();
      if (tick % 2 === 0) okEvents.push(await ingested('EVENT_TYPE_DEPLOYMENT_UPDATED'));
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const okDeliveries = () => t!.deliveryLog.recent(ok.id, 100);
    await waitFor(
      async () => (await okDeliveries()).filter((d) => d.status === 'delivered' || d.status === 'dead').length === 10,
      30_000,
      'every /ok delivery finished',
    );
    const okPaths = origin.requests.filter((r) => r.path === '/ok');
    const finished = await okDeliveries();
    const dead = await t.deliveryLog.recent(downHook.id, 100);
    console.log(
      `last attempt through an open circuit: /ok ${finished.filter((d) => d.status === 'delivered').length} of 10 ` +
        `delivered, ${okPaths.length} requests; /down ${origin.requests.length - okPaths.length} requests, ` +
        `${dead.filter((d) => d.status === 'dead').length} dead letters`,
    );
    expect(finished.map((d) => d.status)).toEqual(Array<string>(10).fill('delivered'));
    expect(new Set(okPaths.map((r) => r.headers['webhook-id']))).toEqual(new Set(okEvents));
    // A dead letter of /down was tried at its last attempt, never recorded unsent.
    for (const d of dead.filter((d) => d.status === 'dead')) expect(d.lastOutcome).not.toBe('circuit_open');
  }, 60_000);

  describe('two vendors on one receiver origin', () => {
    interface Stats {
      circuit: string;
      windows: { hour: { attempts: number; delivered: number; failed: number } };
      concurrency: { limit: number | null; workers: number; paused_until: string | null };
    }
    interface AdminStatus {
      vendor_id: string;
      state: string;
      circuit: { state: string; endpoint: string } | null;
    }

    /** Vendor A's webhook on `${base}/${badPath}`, vendor B's on `${base}/ok` (204), a worker with the production breaker, and their keys. */
    async function sharedOrigin(badPath: string, bad: { status: number; headers?: Record<string, string> }) {
      t = await testApp({ retryScheduleMs: [0, 200, 200] });
      const shared = await receiver();
      shared.script(`/${badPath}`, bad);
      shared.script('/ok', { status: 204 });
      const a = await t.webhooks.create('vendor-a', {
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        callbackUrl: `${shared.base}/${badPath}`,
      });
      const b = await t.webhooks.create('vendor-b', {
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        callbackUrl: `${shared.base}/ok`,
      });
      if (!a.ok || !b.ok) throw new Error('webhooks not created');
      worker = await startTestWorker(t, { workerConcurrency: 10 });
      const keys = {
        a: await t.keyFor(['vendor'], 'vendor-a'),
        b: await t.keyFor(['vendor'], 'vendor-b'),
        admin: await t.keyFor(['admin']),
      };
      const get = async <T>(url: string, key: string) =>
        (await t!.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } })).json<T>();
      return { shared, aId: a.webhook.id, bId: b.webhook.id, keys, get };
    }

    /** Ingests B's five events and waits for them at /ok; answers B's finished and deferred outcomes. */
    async function deliverB(shared: TestReceiver, bId: string) {
      await t!.ingestor.ingest(
        Array.from({ length: 5 }, () => event('EVENT_TYPE_MACHINE_CREATED', 'vendor-b')),
        'http',
      );
      await waitFor(() => shared.at('/ok').length === 5, 10_000, 'vendor B’s five deliveries at /ok');
      // The receiver has a request before its attempt is recorded: wait for the outcomes too.
      await waitFor(
        () => worker!.outcomes.filter((o) => o.job.webhookId === bId && o.kind === 'attempted').length >= 5,
        10_000,
        'vendor B’s five attempts recorded',
      );
      const ofB = worker!.outcomes.filter((o) => o.job.webhookId === bId);
      return {
        attempts: ofB.flatMap((o) => (o.kind === 'attempted' ? [{ attempt: o.attempt, outcome: o.outcome }] : [])),
        deferred: ofB.flatMap((o) => (o.kind === 'deferred' ? [o.reason] : [])),
      };
    }

    it('one vendor’s failing path opens its own circuit only; its test events probe only it; the other vendor’s deliveries, stats and views stay its own', async () => {
      const { shared, aId, bId, keys, get } = await sharedOrigin('bad', { status: 500 });
      await t!.ingestor.ingest(
        Array.from({ length: 10 }, () => event('EVENT_TYPE_MACHINE_CREATED', 'vendor-a')),
        'http',
      );
      await waitFor(
        async () => (await get<Stats>(`/vendors/v1/webhooks/${aId}/stats`, keys.a)).circuit === 'open',
        10_000,
        'vendor A’s circuit to open',
      );

      // A's test event probes A's open circuit at once; the probe fails, so A's circuit opens again, for twice as long.
      const probedMs = Date.now();
      const test = await t!.app.inject({
        method: 'POST',
        url: `/vendors/v1/webhooks/${aId}/test`,
        headers: { 'x-api-key': keys.a },
      });
      expect(test.statusCode).toBe(202);
      const { event_id: testEventId } = test.json<{ event_id: string }>();
      await waitFor(
        () => shared.at('/bad').some((r) => r.atMs >= probedMs && r.headers['webhook-id'] === testEventId),
        5_000,
        'vendor A’s test event as a probe',
      );
      await waitFor(
        () => worker!.outcomes.some((o) => o.kind === 'attempted' && o.job.eventId === testEventId),
        5_000,
        'the probe’s outcome',
      );

      const b = await deliverB(shared, bId);
      const badRequests = shared.at('/bad').length;
      console.log(`isolation: vendor A's path got ${badRequests} requests; vendor B: ${JSON.stringify(b)}`);
      expect(b.attempts).toEqual(Array.from({ length: 5 }, () => ({ attempt: 1, outcome: 'delivered' })));
      expect(b.deferred.filter((reason) => reason === 'open' || reason === 'probing')).toEqual([]);
      expect(worker!.breakers.openEndpoints(Date.now())).toEqual([endpointKey('vendor-a', `${shared.base}/bad`)]);

      // B's stats count B's attempts only and show its circuit closed; A's shows A's open circuit.
      const statsB = await waitFor(
        async () => {
          const stats = await get<Stats>(`/vendors/v1/webhooks/${bId}/stats`, keys.b);
          return stats.windows.hour.attempts === 5 && stats;
        },
        5_000,
        'vendor B’s stats to count its five attempts',
      );
      expect(statsB).toMatchObject({ circuit: 'closed', windows: { hour: { attempts: 5, delivered: 5, failed: 0 } } });
      expect((await get<Stats>(`/vendors/v1/webhooks/${aId}/stats`, keys.a)).circuit).toBe('open');

      // The operator's view: B healthy with no circuit, A held back by its own circuit on the shared origin.
      const adminB = await get<AdminStatus>(`/admin/v1/webhooks/${bId}`, keys.admin);
      expect(adminB).toMatchObject({ vendor_id: 'vendor-b', state: 'healthy', circuit: null });
      const adminA = await get<AdminStatus>(`/admin/v1/webhooks/${aId}`, keys.admin);
      expect(adminA).toMatchObject({
        vendor_id: 'vendor-a',
        state: 'circuit_open',
        circuit: { state: 'open', endpoint: shared.base },
      });
    });

    it('one vendor’s Retry-After pauses and halves only its own flow on the shared origin', async () => {
      const { shared, aId, bId, keys, get } = await sharedOrigin('busy', {
        status: 429,
        headers: { 'retry-after': '60' },
      });
      await t!.ingestor.ingest(
        Array.from({ length: 3 }, () => event('EVENT_TYPE_MACHINE_CREATED', 'vendor-a')),
        'http',
      );
      await waitFor(
        () => worker!.outcomes.some((o) => o.kind === 'deferred' && o.reason === 'paused'),
        10_000,
        'vendor A’s deliveries paused',
      );

      const b = await deliverB(shared, bId);
      console.log(
        `isolation: vendor A's path got ${shared.at('/busy').length} requests (429, Retry-After 60); vendor B: ${JSON.stringify(b)}`,
      );
      expect(b.attempts).toEqual(Array.from({ length: 5 }, () => ({ attempt: 1, outcome: 'delivered' })));
      expect(b.deferred.filter((reason) => reason === 'paused' || reason === 'concurrency')).toEqual([]);

      // Each vendor's stats show its own flow: A paused with its limit halved, B neither.
      const statsB = await waitFor(
        async () => {
          const stats = await get<Stats>(`/vendors/v1/webhooks/${bId}/stats`, keys.b);
          return stats.concurrency.workers === 1 && stats;
        },
        5_000,
        'vendor B’s flow in its stats',
      );
      expect(statsB.concurrency).toMatchObject({ limit: 10, paused_until: null });
      const statsA = await get<Stats>(`/vendors/v1/webhooks/${aId}/stats`, keys.a);
      expect(statsA.concurrency).toMatchObject({ limit: 5, workers: 1 });
      expect(Date.parse(statsA.concurrency.paused_until ?? '')).toBeGreaterThan(Date.now());
    });
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
    const created = await t.webhooks.create('v', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${down.base}/x`,
    });
    if (!created.ok) throw new Error('setup');
    worker = await startTestWorker(t, { sustainedFailureWindowMs: 700, breaker: { failureThreshold: 1_000 } });
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(
      async () => (await t!.webhooks.getById(created.webhook.id))?.disabled?.reason === 'failing',
      10_000,
      'disabled for failing',
    );
    // A success clears the failure run: re-enable, recover, and the webhook stays enabled.
    down.script('/x', { status: 200 });
    await t.webhooks.update('v', created.webhook.id, { enabled: true });
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(
      () => worker!.outcomes.some((o) => o.kind === 'attempted' && o.decision === 'delivered'),
      10_000,
      'delivered after re-enable',
    );
    expect((await t.webhooks.getById(created.webhook.id))?.disabled).toBeUndefined();
    expect(await t.redis.exists(t.keys.deliveries.failingSince(created.webhook.id))).toBe(0);
  });

  it('starts the run of failures over on re-enable, and a paused webhook’s held deliveries do not start it', async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200, 200, 200, 200, 200, 200] });
    const down = await receiver();
    down.script('/x', { status: 503 });
    const created = await t.webhooks.create('v', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${down.base}/x`,
    });
    if (!created.ok) throw new Error('setup');
    const id = created.webhook.id;
    await t.webhooks.update('v', id, { enabled: false });
    worker = await startTestWorker(t, { sustainedFailureWindowMs: 700, breaker: { failureThreshold: 1_000 } });
    // Paused: its delivery is held without being sent, and that starts no failure run.
    await t.ingestor.ingest([event('EVENT_TYPE_MACHINE_CREATED', 'v')], 'http');
    await waitFor(
      () => worker!.outcomes.some((o) => o.kind === 'deferred' && o.reason === 'webhook_paused'),
      10_000,
      'held while paused',
    );
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
    await waitFor(
      () => worker!.outcomes.some((o) => o.kind === 'attempted' && o.outcome === 'http_5xx'),
      10_000,
      'attempt recorded',
    );
    // One 503 right after re-enabling does not disable it again; only a failure run of 700 ms does.
    expect((await t.webhooks.getById(id))?.disabled).toBeUndefined();
    await waitFor(
      async () => (await t!.webhooks.getById(id))?.disabled?.reason === 'failing',
      10_000,
      'disabled after the window',
    );
  });
});
