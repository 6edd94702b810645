import { createHmac, randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const WHSEC = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;
const VENDOR = 'vendor-a';

const machine = (id: string) => ({
  status: 'available',
  metadata: { machine_id: id },
  hardware_specs: { gpus: [{ id: 'g0', name: 'NVIDIA H100' }] },
});
const agent = (id: string, status = 'STATUS_RUNNING') => ({
  deployment_id: id,
  machine_id: 'm-1',
  status,
  fail_reason: '',
  metadata: { k: 'v' },
});

function eventOf(eventType: WebhookEventType, extra: object = {}) {
  const data = eventType.includes('MACHINE')
    ? machine(`m-${randomUUID().slice(0, 8)}`)
    : agent(`d-${randomUUID().slice(0, 8)}`);
  return {
    event_id: randomUUID(),
    event_type: eventType,
    vendor_id: VENDOR,
    timestamp: new Date().toISOString(),
    data,
    ...extra,
  };
}

/** The Standard Webhooks headers of a received request, as the verifier takes them. */
function standardHeaders(request: { headers: Record<string, unknown> }): Record<string, string> {
  const h = request.headers;
  return {
    'webhook-id': String(h['webhook-id']),
    'webhook-timestamp': String(h['webhook-timestamp']),
    'webhook-signature': String(h['webhook-signature']),
  };
}

/** The legacy check a receiver writes by hand. */
function legacyValid(secret: string, body: string, header: string | undefined): boolean {
  return header === `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex')}`;
}

describe('signed delivery pipeline (real Redis, real receiver on 127.0.0.1)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let key: string;

  beforeEach(async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 300, 300] });
    receiver = new TestReceiver();
    await receiver.start();
    key = await t.keyFor(['vendor'], VENDOR);
    // The breaker has its own tests; here every attempt must reach the receiver: circuits stay closed
    // on failures, and one opened by a timeout (a hanging first contact) lasts only 200 ms.
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 } });
  });
  afterEach(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  async function register(eventType: WebhookEventType, path: string, secret?: string): Promise<string> {
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: eventType, callback_url: `${receiver.base}${path}`, ...(secret ? { secret } : {}) },
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  const ingest = async (...events: object[]) => {
    const results = await t.ingestor.ingest(events, 'http');
    expect(results.every((r) => r.status !== 'rejected')).toBe(true);
    return results;
  };

  const deliveries = async (webhookId: string) =>
    (
      await t.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhookId}/deliveries`,
        headers: { 'x-api-key': key },
      })
    ).json<{
      deliveries: {
        delivery_id: string;
        event_id: string;
        status: string;
        attempts: number;
        last_outcome: string;
        replay_of: string | null;
        machine_id: string | null;
        deployment_id: string | null;
      }[];
    }>().deliveries;

  const attemptsOf = async (webhookId: string, deliveryId: string) =>
    (
      await t.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhookId}/deliveries/${deliveryId}`,
        headers: { 'x-api-key': key },
      })
    ).json<{
      delivery: { status: string; event_id: string; replay_of: string | null };
      attempts: { attempt: number; outcome: string; status_code: number | null }[];
    }>();

  it('delivers each of the six event types with the envelope and headers, verifiable by standardwebhooks and by hand', async () => {
    for (const [i, eventType] of WEBHOOK_EVENT_TYPES.entries()) await register(eventType, `/t${i}`, WHSEC);
    const events = WEBHOOK_EVENT_TYPES.map((type) => eventOf(type));
    await ingest(...events);
    await waitFor(() => receiver.requests.length >= 6, 10_000, 'six deliveries');
    const verifier = new StandardWebhook(WHSEC);
    for (const [i, event] of events.entries()) {
      const [request] = receiver.at(`/t${i}`);
      expect(request, event.event_type).toBeDefined();
      const body = request!.body;
      expect(JSON.parse(body)).toEqual({
        version: '1.0',
        event_id: event.event_id,
        event_type: event.event_type,
        timestamp: event.timestamp,
        data: event.data,
      });
      expect(
        body.startsWith(`{"version":"1.0","event_id":"${event.event_id}","event_type":"${event.event_type}"`),
      ).toBe(true);
      const h = request!.headers;
      expect(h['content-type']).toBe('application/json');
      expect(h['user-agent']).toMatch(/^Hookline\//);
      expect(h['webhook-id']).toBe(event.event_id);
      expect(Number(h['webhook-timestamp'])).toBeGreaterThan(Date.now() / 1000 - 60);
      expect(h['x-webhook-event']).toBe(event.event_type);
      expect(h['x-webhook-attempt']).toBe('1');
      expect(
        verifier.verify(body, {
          'webhook-id': String(h['webhook-id']),
          'webhook-timestamp': String(h['webhook-timestamp']),
          'webhook-signature': String(h['webhook-signature']),
        }),
      ).toBeTruthy();
      expect(legacyValid(WHSEC, body, h['x-webhook-signature'] as string)).toBe(true);
    }
    expect(() =>
      verifier.verify('{"tampered":true}', {
        'webhook-id': String(receiver.requests[0]!.headers['webhook-id']),
        'webhook-timestamp': String(receiver.requests[0]!.headers['webhook-timestamp']),
        'webhook-signature': String(receiver.requests[0]!.headers['webhook-signature']),
      }),
    ).toThrow();
  });

  it('signs with both secrets during a rotation, each verifying on its own', async () => {
    const oldSecret = WHSEC;
    const newSecret = `whsec_${Buffer.from('fedcba9876543210fedcba9876543210').toString('base64')}`;
    const id = await register('EVENT_TYPE_MACHINE_UPDATED', '/rot', oldSecret);
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { secret: newSecret },
    });
    expect(patched.json()).toMatchObject({ secret: newSecret });
    await ingest(eventOf('EVENT_TYPE_MACHINE_UPDATED'));
    const [request] = await waitFor(
      () => receiver.at('/rot').length > 0 && receiver.at('/rot'),
      10_000,
      'rotated delivery',
    );
    const h = request!.headers;
    expect(String(h['webhook-signature']).split(' ')).toHaveLength(2);
    expect(new StandardWebhook(newSecret).verify(request!.body, standardHeaders(request!))).toBeTruthy();
    expect(new StandardWebhook(oldSecret).verify(request!.body, standardHeaders(request!))).toBeTruthy();
    // The legacy header carries one signature: the previous secret's, which every receiver still has.
    expect(legacyValid(oldSecret, request!.body, h['x-webhook-signature'] as string)).toBe(true);
    expect(legacyValid(newSecret, request!.body, h['x-webhook-signature'] as string)).toBe(false);
  });

  it('rotates to a secret Hookline generates, returned once, that signs beside the old one', async () => {
    const id = await register('EVENT_TYPE_DEPLOYMENT_CREATED', '/generated', WHSEC);
    const rotate = () =>
      t.app.inject({ method: 'POST', url: `/vendors/v1/webhooks/${id}/rotate-secret`, headers: { 'x-api-key': key } });
    const res = await rotate();
    expect(res.statusCode).toBe(200);
    const {
      secret,
      previous_secret_expires_at: until,
      webhook_id: webhookId,
    } = res.json<{ webhook_id: string; secret: string; previous_secret_expires_at: string }>();
    expect(webhookId).toBe(id);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(Date.parse(until) - Date.now()).toBeGreaterThan(23 * 3_600_000);
    // Each call generates a new one.
    expect((await rotate()).json<{ secret: string }>().secret).not.toBe(secret);
    const generated = await rotate();
    const latest = generated.json<{ secret: string }>().secret;
    await ingest(eventOf('EVENT_TYPE_DEPLOYMENT_CREATED'));
    const [request] = await waitFor(
      () => receiver.at('/generated').length > 0 && receiver.at('/generated'),
      10_000,
      'delivery after the rotation',
    );
    expect(new StandardWebhook(latest).verify(request!.body, standardHeaders(request!))).toBeTruthy();
    // Another vendor's webhook, or none, is not found.
    const other = await t.keyFor(['vendor'], 'someone-else');
    expect(
      (
        await t.app.inject({
          method: 'POST',
          url: `/vendors/v1/webhooks/${id}/rotate-secret`,
          headers: { 'x-api-key': other },
        })
      ).statusCode,
    ).toBe(404);
    expect(
      (
        await t.app.inject({
          method: 'POST',
          url: '/vendors/v1/webhooks/nope/rotate-secret',
          headers: { 'x-api-key': key },
        })
      ).statusCode,
    ).toBe(400);
  });

  it('keeps a receiver that holds only the old secret verifying both headers through a rotation', async () => {
    const secretA = 'secret-A only the old receiver has';
    const secretB = 'secret-B the vendor rotated to';
    /** A receiver written against the webhook's secret `secret`: what it accepts of a request. */
    const receiverHolding = (secret: string, request: { body: string; headers: Record<string, unknown> }) => ({
      standard: (() => {
        try {
          new StandardWebhook(Buffer.from(secret, 'utf8'), { format: 'raw' }).verify(
            request.body,
            standardHeaders(request),
          );
          return true;
        } catch {
          return false;
        }
      })(),
      legacy: legacyValid(secret, request.body, request.headers['x-webhook-signature'] as string | undefined),
    });
    const id = await register('EVENT_TYPE_DEPLOYMENT_UPDATED', '/legacy-rot', secretA);
    await ingest(eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'));
    const [before] = await waitFor(
      () => receiver.at('/legacy-rot').length === 1 && receiver.at('/legacy-rot'),
      10_000,
      'delivery before the rotation',
    );
    expect(receiverHolding(secretA, before!)).toEqual({ standard: true, legacy: true });

    const patchedAtMs = Date.now();
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { secret: secretB },
    });
    expect(patched.statusCode).toBe(200);
    const expiresAt = patched.json<{ previous_secret_expires_at?: string }>().previous_secret_expires_at;
    expect(expiresAt).toBeDefined();
    // The default overlap: 24 h from the PATCH.
    expect(Math.abs(Date.parse(expiresAt!) - (patchedAtMs + 24 * 3_600_000))).toBeLessThan(60_000);

    await ingest(eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'));
    const [, during] = await waitFor(
      () => receiver.at('/legacy-rot').length === 2 && receiver.at('/legacy-rot'),
      10_000,
      'delivery during the overlap',
    );
    // Not yet updated: the old receiver still verifies both headers.
    expect(receiverHolding(secretA, during!)).toEqual({ standard: true, legacy: true });
    // Already updated: the standard header verifies with the new secret; the legacy one still has the old.
    expect(receiverHolding(secretB, during!)).toEqual({ standard: true, legacy: false });
  });

  it('switches the legacy header to the new secret when the rotation overlap ends', async () => {
    await t.close();
    t = await testApp({ retryScheduleMs: [0, 300, 300, 300], secretRotationOverlapMs: 1_000 });
    await worker.close();
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 } });
    key = await t.keyFor(['vendor'], VENDOR);
    const secretA = 'secret-A before the rotation';
    const secretB = 'secret-B after the rotation';
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/after-overlap', secretA);
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { secret: secretB },
    });
    expect(patched.json()).toHaveProperty('previous_secret_expires_at');
    // The overlap is over once the resource stops naming its end.
    await waitFor(
      async () => {
        const listed = await t.app.inject({
          method: 'GET',
          url: '/vendors/v1/webhooks',
          headers: { 'x-api-key': key },
        });
        const [webhook] = listed.json<{ webhooks: Record<string, unknown>[] }>().webhooks;
        return webhook !== undefined && !('previous_secret_expires_at' in webhook);
      },
      10_000,
      'the end of the overlap',
    );
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    const [request] = await waitFor(
      () => receiver.at('/after-overlap').length > 0 && receiver.at('/after-overlap'),
      10_000,
      'delivery after the overlap',
    );
    expect(legacyValid(secretB, request!.body, request!.headers['x-webhook-signature'] as string)).toBe(true);
    expect(legacyValid(secretA, request!.body, request!.headers['x-webhook-signature'] as string)).toBe(false);
    expect(String(request!.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(
      new StandardWebhook(Buffer.from(secretB, 'utf8'), { format: 'raw' }).verify(
        request!.body,
        standardHeaders(request!),
      ),
    ).toBeTruthy();
  });

  it('signs the deliveries of a webhook registered without a secret with the secret generated for it', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED', callback_url: `${receiver.base}/nosecret` },
    });
    expect(res.statusCode).toBe(201);
    const { secret } = res.json<{ secret: string }>();
    await ingest(eventOf('EVENT_TYPE_DEPLOYMENT_CREATED'));
    const [request] = await waitFor(() => receiver.at('/nosecret').length > 0 && receiver.at('/nosecret'));
    expect(new StandardWebhook(secret).verify(request!.body, standardHeaders(request!))).toBeTruthy();
    expect(legacyValid(secret, request!.body, request!.headers['x-webhook-signature'] as string)).toBe(true);
  });

  it('retries a 500 and delivers on attempt 2, recording both attempts', async () => {
    receiver.script('/flaky', { status: 500, body: 'boom' }, { status: 200 });
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/flaky', 'plain-secret');
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    const [delivery] = await waitFor(async () => {
      const list = await deliveries(id);
      return list[0]?.status === 'delivered' && list;
    });
    expect(delivery).toMatchObject({ status: 'delivered', attempts: 2, last_outcome: 'delivered' });
    // A delivered delivery is not a dead letter: replaying it is a conflict, not "not found".
    const replay = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${id}/dead-letters/${delivery!.delivery_id}/replay`,
      headers: { 'x-api-key': key },
    });
    expect(replay.statusCode).toBe(409);
    expect(replay.json<{ code: string }>().code).toBe('not_dead_letter');
    const detail = await attemptsOf(id, delivery!.delivery_id);
    expect(detail.attempts.map((a) => [a.attempt, a.outcome, a.status_code])).toEqual([
      [1, 'http_5xx', 500],
      [2, 'delivered', 200],
    ]);
    const requests = receiver.at('/flaky');
    expect(requests.map((r) => r.headers['x-webhook-attempt'])).toEqual(['1', '2']);
    expect(requests[1]!.headers['webhook-id']).toBe(requests[0]!.headers['webhook-id']);
  });

  it.each([429, 503])('honours Retry-After on %i', async (status) => {
    await t.close();
    t = await testApp({ retryScheduleMs: [0, 3_000, 3_000] });
    await worker.close();
    // Circuits stay closed on failures; one opened by a timeout (a hanging first contact) lasts 200 ms.
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 } });
    key = await t.keyFor(['vendor'], VENDOR);
    receiver.script(`/ra${status}`, { status, headers: { 'retry-after': '1' } }, { status: 200 });
    await register('EVENT_TYPE_MACHINE_CREATED', `/ra${status}`);
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    const requests = await waitFor(
      () => receiver.at(`/ra${status}`).length >= 2 && receiver.at(`/ra${status}`),
      10_000,
    );
    const gapMs = requests[1]!.atMs - requests[0]!.atMs;
    // Retry-After 1 s, not the scheduled 3 s ± 20 %.
    expect(gapMs).toBeGreaterThanOrEqual(900);
    expect(gapMs).toBeLessThan(2_000);
  });

  it('treats a 302 as a failure and never follows it', async () => {
    receiver.script('/redirect', { status: 302, headers: { location: `${receiver.base}/target` } });
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/redirect');
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    await waitFor(() => receiver.at('/redirect').length >= 2);
    const [delivery] = await deliveries(id);
    expect(delivery?.last_outcome).toBe('http_3xx');
    expect(receiver.at('/target')).toHaveLength(0);
  });

  it('times out a hanging receiver and retries', async () => {
    receiver.script('/hang', 'hang', { status: 200 });
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/hang');
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    const [delivery] = await waitFor(async () => {
      const list = await deliveries(id);
      return list[0]?.status === 'delivered' && list;
    });
    const detail = await attemptsOf(id, delivery!.delivery_id);
    expect(detail.attempts.map((a) => a.outcome)).toEqual(['timeout', 'delivered']);
  });

  it('disables the webhook on 410 Gone', async () => {
    receiver.script('/gone', { status: 410 });
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/gone');
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    await waitFor(async () => (await t.webhooks.getById(id))?.disabled?.reason === 'gone', 10_000, 'disabled');
    const listed = (
      await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } })
    ).json<{ webhooks: object[] }>();
    expect(listed.webhooks[0]).toMatchObject({ webhook_id: id, enabled: false, disabled_reason: 'gone' });
    expect(receiver.at('/gone')).toHaveLength(1);
    const reenabled = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { enabled: true },
    });
    expect(reenabled.json()).toMatchObject({ enabled: true });
    expect(reenabled.json()).not.toHaveProperty('disabled_reason');
  });

  it('dead-letters after the last attempt with every attempt, replays one, and bulk-replays as a task', async () => {
    receiver.script('/down', { status: 503 });
    const id = await register('EVENT_TYPE_DEPLOYMENT_UPDATED', '/down');
    await ingest(
      eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'),
      eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'),
      eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'),
    );
    const dead = await waitFor(
      async () => {
        const res = await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/dead-letters`,
          headers: { 'x-api-key': key },
        });
        const list = res.json<{ dead_letters: { delivery_id: string; attempts: number; status: string }[] }>()
          .dead_letters;
        return list.length === 3 && list;
      },
      15_000,
      'three dead letters',
    );
    expect(dead.every((d) => d.status === 'dead' && d.attempts === 4)).toBe(true);
    const detail = await attemptsOf(id, dead[0]!.delivery_id);
    expect(detail.attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'http_5xx', 'http_5xx', 'http_5xx']);
    expect(receiver.at('/down')).toHaveLength(12);

    // The receiver recovers: replay one, then the rest as a task.
    receiver.script('/down', { status: 204 });
    const one = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${id}/dead-letters/${dead[0]!.delivery_id}/replay`,
      headers: { 'x-api-key': key },
    });
    expect(one.statusCode).toBe(202);
    expect(one.json()).toMatchObject({ replay_of: dead[0]!.delivery_id });
    const again = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${id}/dead-letters/${dead[0]!.delivery_id}/replay`,
      headers: { 'x-api-key': key },
    });
    expect(again.statusCode).toBe(409);
    await waitFor(() => receiver.at('/down').length === 13, 10_000, 'replayed delivery');

    const bulk = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${id}/dead-letters/replay`,
      headers: { 'x-api-key': key },
    });
    expect(bulk.statusCode).toBe(202);
    const { task_id: taskId } = bulk.json<{ task_id: string }>();
    const taskKey = await t.keyFor(['tasks:read']);
    const task = await waitFor(
      async () => {
        const res = (
          await t.app.inject({ method: 'GET', url: `/rental/v1/tasks/${taskId}`, headers: { 'x-api-key': taskKey } })
        ).json<{
          status: string;
          progress?: { total: number; done: number };
        }>();
        return res.status === 'success' && res;
      },
      // The task ends once both replays are delivered, not when they are queued.
      30_000,
      'bulk replay task',
    );
    expect(task).toMatchObject({
      task_id: taskId,
      status: 'success',
      fail_reason: null,
      progress: { total: 2, done: 2, queued: 2, delivered: 2, failed: 0, pending: 0 },
    });
    await waitFor(() => receiver.at('/down').length === 15, 10_000, 'bulk replayed deliveries');
    const eventIds = new Set(receiver.at('/down').map((r) => r.headers['webhook-id']));
    expect(eventIds.size).toBe(3);
    const remaining = (
      await t.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${id}/dead-letters`,
        headers: { 'x-api-key': key },
      })
    ).json<{
      dead_letters: unknown[];
    }>();
    expect(remaining.dead_letters).toHaveLength(0);
  });

  it('answers the ids of a replay, a bulk replay and a test event at once, before any worker has picked them up', async () => {
    receiver.script('/later', { status: 503 });
    const id = await register('EVENT_TYPE_DEPLOYMENT_UPDATED', '/later');
    await ingest(eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'), eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED'));
    const dead = await waitFor(
      async () => {
        const res = await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/dead-letters`,
          headers: { 'x-api-key': key },
        });
        const list = res.json<{ dead_letters: { delivery_id: string }[] }>().dead_letters;
        return list.length === 2 && list;
      },
      15_000,
      'two dead letters',
    );
    expect(
      (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/dead-letters?limit=1`,
          headers: { 'x-api-key': key },
        })
      ).json(),
    ).toMatchObject({
      total: 2,
    });
    // No worker from here on: whatever the API answers now was written before its 202.
    await worker.close();
    receiver.script('/later', { status: 204 });
    const api = (method: 'GET' | 'POST', url: string) => t.app.inject({ method, url, headers: { 'x-api-key': key } });

    const replay = await api('POST', `/vendors/v1/webhooks/${id}/dead-letters/${dead[0]!.delivery_id}/replay`);
    expect(replay.statusCode).toBe(202);
    const replayId = replay.json<{ delivery_id: string }>().delivery_id;
    const replayed = await api('GET', `/vendors/v1/webhooks/${id}/deliveries/${replayId}`);
    expect(replayed.statusCode, replayed.body).toBe(200);
    expect(replayed.json()).toMatchObject({
      delivery: {
        delivery_id: replayId,
        status: 'pending',
        attempts: 0,
        replay_of: dead[0]!.delivery_id,
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
      },
      attempts: [],
    });
    expect((await attemptsOf(id, replayId)).delivery.event_id).toBe(
      (await attemptsOf(id, dead[0]!.delivery_id)).delivery.event_id,
    );
    expect((await deliveries(id)).map((d) => d.delivery_id)).toContain(replayId);
    // The count a bulk replay would take on: the one dead letter left.
    expect((await api('GET', `/vendors/v1/webhooks/${id}/dead-letters?limit=1`)).json()).toMatchObject({
      total: 1,
      dead_letters: [{ delivery_id: dead[1]!.delivery_id }],
    });

    const test = await api('POST', `/vendors/v1/webhooks/${id}/test`);
    expect(test.statusCode).toBe(202);
    const testId = test.json<{ delivery_id: string }>().delivery_id;
    const tested = await api('GET', `/vendors/v1/webhooks/${id}/deliveries/${testId}`);
    expect(tested.statusCode, tested.body).toBe(200);
    expect(tested.json()).toMatchObject({
      delivery: { delivery_id: testId, status: 'pending', attempts: 0, replay_of: null },
    });

    const bulk = await api('POST', `/vendors/v1/webhooks/${id}/dead-letters/replay`);
    expect(bulk.statusCode).toBe(202);
    const taskId = bulk.json<{ task_id: string }>().task_id;
    const task = await api('GET', `/rental/v1/tasks/${taskId}`);
    expect(task.statusCode, task.body).toBe(200);
    expect(task.json()).toMatchObject({ task_id: taskId, status: 'pending', fail_reason: null });

    // A worker then delivers each of them, and the records it writes take over the pending ones.
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 } });
    await waitFor(
      async () => (await api('GET', `/rental/v1/tasks/${taskId}`)).json<{ status: string }>().status === 'success',
      15_000,
      'the bulk replay to succeed',
    );
    for (const deliveryId of [replayId, testId]) {
      const done = await waitFor(async () => {
        const found = await attemptsOf(id, deliveryId);
        return found.delivery.status === 'delivered' && found;
      });
      expect(done.attempts.map((a) => a.outcome)).toEqual(['delivered']);
    }
    expect((await attemptsOf(id, replayId)).delivery).toMatchObject({ replay_of: dead[0]!.delivery_id });
  });

  it('delivers an event_id sent twice exactly once', async () => {
    await register('EVENT_TYPE_MACHINE_CREATED', '/once');
    const event = eventOf('EVENT_TYPE_MACHINE_CREATED');
    const [first] = await ingest(event);
    const [second] = await ingest(event);
    expect(first?.status).toBe('accepted');
    expect(second?.status).toBe('duplicate');
    await waitFor(() => receiver.at('/once').length === 1);
    // Nothing is left that could deliver it again.
    await queuesDrained(t.queues);
    expect(receiver.at('/once')).toHaveLength(1);
  });

  it('drops the pending deliveries of a deleted webhook', async () => {
    receiver.script('/deleted', { status: 500 });
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/deleted');
    await ingest(eventOf('EVENT_TYPE_MACHINE_CREATED'));
    await waitFor(() => receiver.at('/deleted').length === 1);
    const del = await t.app.inject({
      method: 'DELETE',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
    });
    expect(del.statusCode).toBe(204);
    await waitFor(() => worker.outcomes.some((o) => o.kind === 'dropped'), 10_000, 'drop');
    await queuesDrained(t.queues);
    expect(receiver.at('/deleted')).toHaveLength(1);
  });

  it('sends a test event on request', async () => {
    const id = await register('EVENT_TYPE_DEPLOYMENT_STOPPED', '/test', WHSEC);
    const res = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${id}/test`,
      headers: { 'x-api-key': key },
    });
    expect(res.statusCode).toBe(202);
    const [request] = await waitFor(() => receiver.at('/test').length > 0 && receiver.at('/test'));
    expect(JSON.parse(request!.body)).toMatchObject({
      version: '1.0',
      event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED',
      data: { test: true },
    });
    expect(request!.headers['webhook-id']).toBe(res.json<{ event_id: string }>().event_id);
  });

  it('names in the delivery log the machine and deployment each event concerns, a replay’s and a dead letter’s too; a test event none', async () => {
    receiver.script('/deployments', { status: 503 });
    const machines = await register('EVENT_TYPE_MACHINE_CREATED', '/machines');
    const deployments = await register('EVENT_TYPE_DEPLOYMENT_STOPPED', '/deployments');
    const [machineId, deploymentId] = [`m-${randomUUID().slice(0, 8)}`, `d-${randomUUID().slice(0, 8)}`];
    const created = eventOf('EVENT_TYPE_MACHINE_CREATED', { data: machine(machineId) });
    const stopped = eventOf('EVENT_TYPE_DEPLOYMENT_STOPPED', { data: agent(deploymentId) });
    await ingest(created, stopped);
    const get = async (url: string) =>
      (await t.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } })).json<Record<string, unknown>>();
    const dead = await waitFor(
      async () => (await deliveries(deployments)).find((d) => d.status === 'dead'),
      15_000,
      'the dead letter',
    );
    const subjectOfStopped = { machine_id: 'm-1', deployment_id: deploymentId };
    expect(dead).toMatchObject({ event_id: stopped.event_id, ...subjectOfStopped });
    expect(await get(`/vendors/v1/webhooks/${deployments}/dead-letters`)).toMatchObject({
      dead_letters: [{ delivery_id: dead.delivery_id, ...subjectOfStopped }],
    });

    receiver.script('/deployments', { status: 204 });
    const replayed = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${deployments}/dead-letters/${dead.delivery_id}/replay`,
      headers: { 'x-api-key': key },
    });
    expect(replayed.statusCode).toBe(202);
    const test = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${machines}/test`,
      headers: { 'x-api-key': key },
    });
    expect(test.statusCode).toBe(202);
    await waitFor(() => receiver.at('/machines').length === 2 && receiver.at('/deployments').length === 5);

    const replayId = replayed.json<{ delivery_id: string }>().delivery_id;
    expect(await get(`/vendors/v1/webhooks/${deployments}/deliveries/${replayId}`)).toMatchObject({
      delivery: { replay_of: dead.delivery_id, ...subjectOfStopped },
    });
    const machineRows = await deliveries(machines);
    expect(machineRows.map((d) => [d.event_id, d.machine_id, d.deployment_id])).toEqual([
      [test.json<{ event_id: string }>().event_id, null, null],
      [created.event_id, machineId, null],
    ]);
  });

  it('a bulk replay drops dead letters whose records expired and replays the rest', async () => {
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/replayed');
    const nowMs = Date.now();
    const dead = Array.from({ length: 5 }, (_, i) => ({
      deliveryId: randomUUID(),
      eventId: randomUUID(),
      eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
      vendorId: VENDOR,
      webhookId: id,
      body: JSON.stringify({ n: i }),
      acceptedAtMs: nowMs + i,
    }));
    for (const [i, job] of dead.entries()) {
      await t.deliveryLog.recordAttempt({
        job,
        attempt: { attempt: 1, atMs: nowMs + i, outcome: 'http_5xx', statusCode: 500, durationMs: 1 },
        status: 'dead',
      });
    }
    // The three oldest records expired (their ids stay in the set until something removes them).
    for (const job of dead.slice(0, 3)) await t.redis.del(t.keys.deliveries.record(id, job.deliveryId));

    const taskId = await t.replayer.createTask(VENDOR, id);
    // Pages of 2: with the old behaviour every page started with the same expired ids.
    const result = await t.replayer.runReplayAll(taskId, id, { pageSize: 2 });
    expect(result).toEqual({ replayed: 2, skipped: 3 });
    expect(await t.deliveryLog.deadLetterIds(id, 10)).toEqual([]);
    expect((await t.tasks.get(taskId))?.progress).toEqual({ total: 5, done: 5, queued: 2 });
    await waitFor(() => receiver.at('/replayed').length === 2, 10_000, 'two replays delivered');
    // Queued is not delivered: the task ends once both replays have their outcome.
    const finished = await waitFor(
      async () => {
        const view = await t.replayTasks.view(taskId);
        return view?.task.status === 'success' ? view : undefined;
      },
      10_000,
      'the task to end',
    );
    expect(finished).toEqual({
      vendorId: VENDOR,
      task: {
        task_id: taskId,
        status: 'success',
        fail_reason: null,
        progress: { total: 5, done: 5, queued: 2, delivered: 2, failed: 0, pending: 0 },
      },
    });
    expect(
      receiver
        .at('/replayed')
        .map((r) => r.body)
        .sort(),
    ).toEqual([dead[3]!.body, dead[4]!.body]);
  });

  it('answers 404 for another vendor’s deliveries and 400 for malformed ids', async () => {
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/x');
    const other = await t.keyFor(['vendor'], 'vendor-b');
    expect(
      (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/deliveries`,
          headers: { 'x-api-key': other },
        })
      ).statusCode,
    ).toBe(404);
    expect(
      (await t.app.inject({ method: 'POST', url: `/vendors/v1/webhooks/${id}/test`, headers: { 'x-api-key': other } }))
        .statusCode,
    ).toBe(404);
    expect(
      (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/deliveries/nope`,
          headers: { 'x-api-key': key },
        })
      ).json(),
    ).toEqual({
      error: 'Invalid delivery_id format',
      code: 'invalid_delivery_id',
    });
    expect(
      (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${id}/deliveries/${randomUUID()}`,
          headers: { 'x-api-key': key },
        })
      ).statusCode,
    ).toBe(404);
  });
});
