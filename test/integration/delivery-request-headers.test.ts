import { randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { TestReceiver, type ReceivedRequest } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-headers';
const WHSEC = `whsec_${Buffer.from('request-headers-secret-32-bytes!').toString('base64')}`;
const ROTATED = `whsec_${Buffer.from('the-rotated-secret-of-32-bytes!!').toString('base64')}`;

interface Attempt {
  attempt: number;
  outcome: string;
  request_headers: Record<string, string> | null;
}

/**
 * What the delivery log must show for a request the receiver got: every header, in the order
 * received, each signature entry cut to its scheme prefix.
 */
function maskedAsReceived(request: ReceivedRequest): [string, string][] {
  return Object.entries(request.headers).map(([name, value]) => [
    name,
    name.includes('signature')
      ? String(value)
          .split(' ')
          .map((entry) => entry.replace(/^(v1,|sha256=).+$/, '$1••••'))
          .join(' ')
      : String(value),
  ]);
}

describe('per-attempt request headers in the delivery log (real Redis, real receiver)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let key: string;

  beforeEach(async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200] });
    receiver = new TestReceiver();
    await receiver.start();
    key = await t.keyFor(['vendor'], VENDOR);
    worker = await startTestWorker(t, {
      breaker: { failureThreshold: 1_000, failureRate: 1, minAttempts: 1_000, openMs: 200, openMsMax: 200 },
    });
  });
  afterEach(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  async function register(path: string, secret?: string): Promise<string> {
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: {
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
        callback_url: `${receiver.base}${path}`,
        ...(secret === undefined ? {} : { secret }),
      },
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  /** Ingests one event (with a non-ASCII body: content-length counts bytes) and answers its delivery's id. */
  async function deliverOne(webhookId: string): Promise<string> {
    const eventId = randomUUID();
    await t.ingestor.ingest(
      [
        {
          event_id: eventId,
          event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
          vendor_id: VENDOR,
          data: {
            deployment_id: `d-${eventId.slice(0, 8)}`,
            machine_id: 'm-1',
            status: 'STATUS_RUNNING',
            fail_reason: '',
            metadata: { note: 'déjà vu ✓' },
          },
        },
      ],
      'http',
    );
    const listed = await waitFor(async () => {
      const res = await t.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhookId}/deliveries?status=delivered`,
        headers: { 'x-api-key': key },
      });
      return res
        .json<{ deliveries: { delivery_id: string; event_id: string }[] }>()
        .deliveries.find((d) => d.event_id === eventId);
    });
    return listed.delivery_id;
  }

  async function attemptsOf(webhookId: string, deliveryId: string): Promise<Attempt[]> {
    const res = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${webhookId}/deliveries/${deliveryId}`,
      headers: { 'x-api-key': key },
    });
    expect(res.statusCode).toBe(200);
    return res.json<{ attempts: Attempt[] }>().attempts;
  }

  it('shows each attempt’s headers exactly as the receiver got them, signatures masked', async () => {
    receiver.script('/signed', { status: 503 }, { status: 204 });
    const id = await register('/signed', WHSEC);
    const deliveryId = await deliverOne(id);
    const received = receiver.at('/signed');
    expect(received).toHaveLength(2);
    // The requests really carried verifiable signatures; the log shows none of them.
    for (const request of received)
      new StandardWebhook(WHSEC).verify(request.body, request.headers as Record<string, string>);

    const attempts = await attemptsOf(id, deliveryId);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'delivered']);
    for (const [i, attempt] of attempts.entries()) {
      expect(Object.entries(attempt.request_headers ?? {})).toEqual(maskedAsReceived(received[i]!));
    }
    const [first, second] = attempts.map((a) => a.request_headers!);
    expect(first).toMatchObject({
      'webhook-signature': 'v1,••••',
      'x-webhook-signature': 'sha256=••••',
      'x-webhook-attempt': '1',
    });
    expect(second!['x-webhook-attempt']).toBe('2');
    expect(JSON.stringify(attempts)).not.toContain(String(received[0]!.headers['webhook-signature']).slice(3));
  });

  it('shows both signatures during a rotation, none without a secret, and no headers for an attempt that sent nothing', async () => {
    const rotating = await register('/rotating', WHSEC);
    const rotated = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${rotating}`,
      headers: { 'x-api-key': key },
      payload: { secret: ROTATED },
    });
    expect(rotated.statusCode).toBe(200);
    const rotatingDelivery = await deliverOne(rotating);
    const [duringRotation] = await attemptsOf(rotating, rotatingDelivery);
    expect(duringRotation!.request_headers).toMatchObject({
      'webhook-signature': 'v1,•••• v1,••••',
      'x-webhook-signature': 'sha256=••••',
    });
    expect(Object.entries(duringRotation!.request_headers!)).toEqual(maskedAsReceived(receiver.at('/rotating')[0]!));

    // The second webhook type for this vendor, stored before registration generated secrets: no
    // secret in its record, so no signature headers at all.
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: `${receiver.base}/plain` },
    });
    const plain = res.json<{ webhook_id: string }>().webhook_id;
    const { secretSealed: _sealed, ...unsigned } = JSON.parse(
      (await t.redis.hget(t.keys.webhooks.byId, plain))!,
    ) as Record<string, unknown>;
    await t.redis.hset(t.keys.webhooks.byId, plain, JSON.stringify(unsigned));
    await t.ingestor.ingest(
      [
        {
          event_type: 'EVENT_TYPE_MACHINE_CREATED',
          vendor_id: VENDOR,
          data: { status: 'available', metadata: { machine_id: 'm-plain' } },
        },
      ],
      'http',
    );
    await waitFor(() => receiver.at('/plain').length === 1, 10_000, 'the unsigned delivery');
    const [plainDelivery] = await waitFor(async () => {
      const list = (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${plain}/deliveries?status=delivered`,
          headers: { 'x-api-key': key },
        })
      ).json<{ deliveries: { delivery_id: string }[] }>().deliveries;
      return list.length === 1 && list;
    });
    const [unsignedAttempt] = await attemptsOf(plain, plainDelivery!.delivery_id);
    expect(Object.entries(unsignedAttempt!.request_headers!)).toEqual(maskedAsReceived(receiver.at('/plain')[0]!));
    expect(Object.keys(unsignedAttempt!.request_headers!).some((name) => name.includes('signature'))).toBe(false);

    // Disabled by the engine (as after a 410): the delivery is dead-lettered without a request, so it has no headers to show.
    expect(await t.webhooks.disable(rotating, 'gone')).toBe(true);
    await t.ingestor.ingest(
      [
        {
          event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
          vendor_id: VENDOR,
          data: {
            deployment_id: 'd-disabled',
            machine_id: 'm-1',
            status: 'STATUS_RUNNING',
            fail_reason: '',
            metadata: {},
          },
        },
      ],
      'http',
    );
    const [dead] = await waitFor(async () => {
      const list = (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${rotating}/dead-letters`,
          headers: { 'x-api-key': key },
        })
      ).json<{
        dead_letters: { delivery_id: string }[];
      }>().dead_letters;
      return list.length === 1 && list;
    });
    const [notSent] = await attemptsOf(rotating, dead!.delivery_id);
    expect(notSent).toMatchObject({ outcome: 'webhook_disabled', request_headers: null });
  });

  it('shows another vendor nothing of them', async () => {
    const id = await register('/private', WHSEC);
    const deliveryId = await deliverOne(id);
    const other = await t.keyFor(['vendor'], 'vendor-other');
    const res = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${id}/deliveries/${deliveryId}`,
      headers: { 'x-api-key': other },
    });
    expect(res.statusCode).toBe(404);
    expect(res.body).not.toContain('request_headers');
  });
});
