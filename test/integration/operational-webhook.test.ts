import { randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import type { OperationalWebhookPayload } from '../../src/delivery/operational.js';
import { capturedLogs } from '../helpers/logs.js';
import { testApp, testEngine, type TestApp } from '../helpers/app.js';
import { receiverPool, type ReceivedRequest, type TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, testWorkerConfig, type TestWorker, type TestWorkerSettings } from '../helpers/worker.js';

const OPS_SECRET = `whsec_${Buffer.from('operational-secret-32-bytes-long').toString('base64')}`;
const VENDOR_SECRET = `whsec_${Buffer.from('vendor-secret-of-32-bytes-length').toString('base64')}`;
const VENDOR = 'vendor-ops';
/** Every circuit stays closed: each attempt must reach the receiver. */
const BREAKER = { failureThreshold: 1_000, failureRate: 1, minAttempts: 1_000, openMs: 200, openMsMax: 200 };

const machineEvent = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_CREATED',
  vendor_id: VENDOR,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

/** The verified body of an operational webhook: throws unless the operational secret signed it (standardwebhooks' own check). */
function verified(request: ReceivedRequest): OperationalWebhookPayload {
  const h = request.headers;
  const headers = {
    'webhook-id': String(h['webhook-id']),
    'webhook-timestamp': String(h['webhook-timestamp']),
    'webhook-signature': String(h['webhook-signature']),
  };
  return new StandardWebhook(OPS_SECRET).verify(request.body, headers) as OperationalWebhookPayload;
}

describe('operational webhooks (real Redis, real receivers)', () => {
  const receivers = receiverPool();
  const workers: TestWorker[] = [];
  let t: TestApp | undefined;
  const logs = capturedLogs();
  const logLines = logs.lines;
  const logger = logs.logger;

  afterEach(async () => {
    for (const worker of workers.splice(0)) await worker.close();
    await t?.close();
    t = undefined;
    await receivers.closeAll();
    logs.clear();
  });

  /** An app whose operational webhooks go to a receiver of their own (`/ops`), a vendor receiver, and a vendor key. */
  async function setUp(options: { retryScheduleMs?: number[] } = {}) {
    const ops = await receivers.start();
    const vendor = await receivers.start();
    t = await testApp({
      retryScheduleMs: options.retryScheduleMs ?? [0, 200, 200, 200],
      operationalWebhook: { url: `${ops.base}/ops?channel=vendors`, secret: OPS_SECRET },
      logger: logger(),
    });
    const key = await t.keyFor(['vendor'], VENDOR);
    return { ops, vendor, key, app: t };
  }

  async function startWorker(app: TestApp, settings: TestWorkerSettings = {}): Promise<TestWorker> {
    const worker = await startTestWorker(app, { breaker: BREAKER, logger: logger(), ...settings });
    workers.push(worker);
    return worker;
  }

  async function register(app: TestApp, key: string, callbackUrl: string): Promise<string> {
    const res = await app.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: callbackUrl, secret: VENDOR_SECRET },
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  const opsPath = '/ops?channel=vendors';
  const typesAt = (ops: TestReceiver) => ops.at(opsPath).map((r) => verified(r).type);

  it('sends one signed webhook.disabled when a receiver answers 410, and webhook.recovered when the vendor or an operator enables it again', async () => {
    const { ops, vendor, key, app } = await setUp();
    vendor.script('/gone', { status: 410 });
    await startWorker(app);
    const id = await register(app, key, `${vendor.base}/gone`);
    await app.ingestor.ingest([machineEvent(), machineEvent(), machineEvent()], 'http');

    const [disabledRequest] = await waitFor(
      () => ops.at(opsPath).length > 0 && ops.at(opsPath),
      10_000,
      'webhook.disabled',
    );
    const disabled = verified(disabledRequest!);
    const webhook = await app.webhooks.getById(id);
    expect(webhook?.disabled?.reason).toBe('gone');
    expect(disabled).toEqual({
      type: 'webhook.disabled',
      timestamp: new Date(webhook!.disabled!.atMs).toISOString(),
      data: {
        webhook_id: id,
        vendor_id: VENDOR,
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: `${vendor.base}/gone`,
        reason: 'gone',
        disabled_at: new Date(webhook!.disabled!.atMs).toISOString(),
      },
    });
    expect(disabledRequest!.headers).toMatchObject({
      'content-type': 'application/json',
      'x-webhook-event': 'webhook.disabled',
      'x-webhook-attempt': '1',
    });
    expect(disabledRequest!.headers['x-webhook-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    // The vendor's secret never travels to the platform.
    expect(disabledRequest!.body).not.toContain(VENDOR_SECRET);
    // The other deliveries found the webhook disabled (or raced to disable it): still one message.
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(1);

    // The vendor re-enables it (the portal's re-enable is the same PATCH).
    const enabled = await app.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { enabled: true },
    });
    expect(enabled.statusCode).toBe(200);
    const recovered = verified(await waitFor(() => ops.at(opsPath)[1], 10_000, 'webhook.recovered'));
    expect(recovered).toMatchObject({
      type: 'webhook.recovered',
      data: {
        webhook_id: id,
        vendor_id: VENDOR,
        reason: 'gone',
        disabled_at: disabled.data.disabled_at,
        recovered_at: recovered.timestamp,
      },
    });
    expect(Date.parse(recovered.timestamp)).toBeGreaterThanOrEqual(Date.parse(disabled.timestamp));
    expect(ops.at(opsPath)[1]!.headers['webhook-id']).not.toBe(disabledRequest!.headers['webhook-id']);

    // Enabling what is enabled, and a vendor's own pause and resume, tell the platform nothing.
    for (const enabledNow of [true, false, true]) {
      const res = await app.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${id}`,
        headers: { 'x-api-key': key },
        payload: { enabled: enabledNow },
      });
      expect(res.statusCode).toBe(200);
    }
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(2);

    // Gone again: disabled again; this time an operator enables it.
    await app.ingestor.ingest([machineEvent()], 'http');
    await waitFor(() => ops.at(opsPath).length === 3, 10_000, 'the second webhook.disabled');
    const admin = await app.keyFor(['admin']);
    const operatorEnabled = await app.app.inject({
      method: 'POST',
      url: `/admin/v1/webhooks/${id}/enable`,
      headers: { 'x-api-key': admin },
    });
    expect(operatorEnabled.statusCode).toBe(200);
    await waitFor(() => ops.at(opsPath).length === 4, 10_000, 'the second webhook.recovered');
    expect(typesAt(ops)).toEqual(['webhook.disabled', 'webhook.recovered', 'webhook.disabled', 'webhook.recovered']);

    // The receiver has the fourth request before its sender has logged the answer.
    const sent = await waitFor(() => {
      const found = logLines.filter((l) => l.event === 'operational_webhook.sent');
      return found.length >= 4 && found;
    });
    expect(sent).toHaveLength(4);
    expect(sent[0]).toMatchObject({
      type: 'webhook.disabled',
      webhookId: id,
      vendorId: VENDOR,
      attempt: 1,
      status: 200,
      target: ops.base,
    });
    // Neither secret, nor a signature, nor the receiver's query reaches the logs.
    const logged = JSON.stringify(logLines);
    for (const secret of [
      OPS_SECRET,
      VENDOR_SECRET,
      'channel=vendors',
      String(disabledRequest!.headers['webhook-signature']),
    ])
      expect(logged).not.toContain(secret);
  });

  it('sends webhook.disabled with reason failing after the sustained-failure window', async () => {
    const { ops, vendor, key, app } = await setUp({ retryScheduleMs: [0, 200, 200, 200, 200, 200, 200, 200] });
    vendor.script('/down', { status: 503 });
    await startWorker(app, { sustainedFailureWindowMs: 700 });
    const id = await register(app, key, `${vendor.base}/down`);
    await app.ingestor.ingest([machineEvent()], 'http');

    const request = await waitFor(() => ops.at(opsPath)[0], 15_000, 'webhook.disabled (failing)');
    expect(verified(request)).toMatchObject({ type: 'webhook.disabled', data: { webhook_id: id, reason: 'failing' } });
    expect((await app.webhooks.getById(id))?.disabled?.reason).toBe('failing');
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(1);
  });

  it('tells one disable once however many workers race to it', async () => {
    const { ops, vendor, key, app } = await setUp();
    vendor.script('/flaky', { status: 200 });
    const first = await startWorker(app);
    const second = await startWorker(app);
    const id = await register(app, key, `${vendor.base}/flaky`);
    // One answer first, so both workers know the endpoint answers and send to it concurrently.
    await app.ingestor.ingest([machineEvent()], 'http');
    await waitFor(() => vendor.at('/flaky').length === 1, 10_000, 'the first delivery');

    // Slow 410s: many attempts are in flight in both workers when the first 410 arrives.
    vendor.script('/flaky', { status: 410, delayMs: 300 });
    await Promise.all(
      Array.from({ length: 4 }, () =>
        app.ingestor.ingest(
          Array.from({ length: 10 }, () => machineEvent()),
          'http',
        ),
      ),
    );
    await waitFor(() => ops.at(opsPath).length > 0, 10_000, 'webhook.disabled');
    const count = await quiescent(() => ops.at(opsPath).length, 700);
    const gone = [first, second].map(
      (w) => w.outcomes.filter((o) => o.kind === 'attempted' && o.decision === 'disable').length,
    );
    console.log(`operational race: 410 answers per worker ${gone.join(' and ')}; webhook.disabled messages ${count}`);
    expect(gone[0]! + gone[1]!).toBeGreaterThan(1);
    expect(count).toBe(1);
    expect(verified(ops.at(opsPath)[0]!).data).toMatchObject({ webhook_id: id, reason: 'gone' });

    // The same through two processes' stores at once, with nothing else in the way: one true, one message.
    await queuesDrained(app.queues);
    await app.webhooks.update(VENDOR, id, { enabled: true });
    await waitFor(() => ops.at(opsPath).length === 2, 10_000, 'webhook.recovered');
    const other = await testEngine(testWorkerConfig(app), { role: 'api' });
    try {
      const flipped = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          (i % 2 === 0 ? app.webhooks : other.stores.webhooks).disable(id, i % 4 === 0 ? 'gone' : 'failing'),
        ),
      );
      expect(flipped.filter(Boolean)).toHaveLength(1);
    } finally {
      await other.close(0);
    }
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(3);
  });

  it('retries a failed operational webhook on the delivery schedule under the same webhook-id', async () => {
    const { ops, key, vendor, app } = await setUp();
    ops.script(opsPath, { status: 503 }, { status: 500 }, { status: 204 });
    await startWorker(app);
    const id = await register(app, key, `${vendor.base}/unused`);
    expect(await app.webhooks.disable(id, 'gone')).toBe(true);

    await waitFor(() => ops.at(opsPath).length === 3, 10_000, 'three attempts');
    const attempts = ops.at(opsPath);
    expect(new Set(attempts.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(attempts.map((r) => r.headers['x-webhook-attempt'])).toEqual(['1', '2', '3']);
    expect(new Set(attempts.map((r) => r.body)).size).toBe(1);
    for (const request of attempts) expect(verified(request).type).toBe('webhook.disabled');
    const lines = await waitFor(() => {
      const found = logLines.filter((l) => String(l.event).startsWith('operational_webhook.'));
      return found.length === 3 && found;
    });
    expect(lines.map((l) => [l.event, l.attempt, l.status, l.willRetry])).toEqual([
      ['operational_webhook.failed', 1, 503, true],
      ['operational_webhook.failed', 2, 500, true],
      ['operational_webhook.sent', 3, 204, undefined],
    ]);
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(3);
  });

  it('reaches an operational receiver on a private address with the SSRF guard on: the operator set that URL, not a vendor', async () => {
    const { ops, key, vendor, app } = await setUp({ retryScheduleMs: [0, 100] });
    await startWorker(app, { allowPrivateTargets: false });
    const id = await register(app, key, `${vendor.base}/unused`);
    expect(await app.webhooks.disable(id, 'gone')).toBe(true);

    const sent = await waitFor(() => logLines.find((l) => l.event === 'operational_webhook.sent'));
    expect(sent).toMatchObject({ attempt: 1, status: 200 });
    expect(await quiescent(() => ops.at(opsPath).length, 500)).toBe(1);
    expect(logLines.filter((l) => l.event === 'operational_webhook.failed')).toEqual([]);
  });
});
