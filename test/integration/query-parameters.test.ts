import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { AttemptWrite } from '../../src/store/delivery-log.js';
import { testApp, type TestApp } from '../helpers/app.js';

const T0 = Date.UTC(2025, 0, 2, 3, 4, 5);
const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

describe('query parameters', () => {
  let t: TestApp;
  let key: string;
  let webhookId: string;

  beforeEach(async () => {
    t = await testApp();
    key = await t.keyFor(['vendor', 'machines:read'], 'v-q');
    const created = await t.webhooks.create('v-q', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/q',
    });
    if (!created.ok) throw new Error('setup');
    webhookId = created.webhook.id;
  });
  afterEach(async () => t.close());

  const get = (url: string) => t.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } });

  /** Records delivery `n` (accepted at T0 + n s) as finished with `status`. */
  async function record(n: number, status: AttemptWrite['status']): Promise<string> {
    const job: DeliverJob = {
      deliveryId: uuid(n),
      eventId: uuid(10_000 + n),
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      vendorId: 'v-q',
      webhookId,
      body: '{}',
      acceptedAtMs: T0 + n * 1_000,
    };
    const attempt = {
      attempt: 1,
      atMs: job.acceptedAtMs + 500,
      outcome: status === 'delivered' ? 'delivered' : 'http_5xx',
      durationMs: 5,
    };
    await t.deliveryLog.recordAttempt({
      job,
      attempt,
      status,
      ...(status === 'retrying' ? { nextAttemptAtMs: T0 + 3_600_000 } : {}),
    });
    return job.deliveryId;
  }

  const ids = (res: { json: <T>() => T }) =>
    res
      .json<{ deliveries: { delivery_id: string; status: string }[] }>()
      .deliveries.map((d) => [d.delivery_id, d.status]);

  it('filters a webhook’s deliveries by status, newest first, scanning past non-matching ones until limit match', async () => {
    const oldestDead = await record(1, 'dead');
    const retrying = await record(2, 'retrying');
    const dead = await record(3, 'dead');
    // 30 newer deliveries that all succeeded: more than a page of them before any dead one.
    const delivered: string[] = [];
    for (let n = 4; n < 34; n += 1) delivered.push(await record(n, 'delivered'));

    const deadOnly = await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=dead`);
    expect(deadOnly.statusCode).toBe(200);
    expect(ids(deadOnly)).toEqual([
      [dead, 'dead'],
      [oldestDead, 'dead'],
    ]);
    expect(ids(await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=dead&limit=1`))).toEqual([
      [dead, 'dead'],
    ]);
    expect(ids(await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=retrying`))).toEqual([
      [retrying, 'retrying'],
    ]);
    expect(ids(await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=delivered&limit=3`))).toEqual(
      delivered
        .slice(-3)
        .reverse()
        .map((id) => [id, 'delivered']),
    );
    expect(ids(await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=replayed`))).toEqual([]);
    // Without a status: the newest 20 whatever their status, as before.
    expect(ids(await get(`/vendors/v1/webhooks/${webhookId}/deliveries`))).toHaveLength(20);
  });

  it('answers 400 for a status that is not a delivery status', async () => {
    const res = await get(`/vendors/v1/webhooks/${webhookId}/deliveries?status=failed`);
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: 'Invalid query parameters: status must be one of pending, retrying, delivered, dead, dropped, replayed',
      code: 'invalid_request',
    });
  });

  it('answers 400 naming an unknown query parameter on the routes that take a query string', async () => {
    for (const [url, takes] of [
      [
        `/vendors/v1/webhooks/${webhookId}/deliveries?limit=5&state=dead`,
        'limit, status, event_type, since, until, cursor',
      ],
      [`/vendors/v1/webhooks/${webhookId}/dead-letters?status=dead`, 'limit'],
      ['/rental/v1/machines?filter=gpu_name:h100&pagesize=5', 'filter, page, page_size'],
    ] as const) {
      const res = await get(url);
      expect([url, res.statusCode]).toEqual([url, 400]);
      const unknown = url.includes('state=') ? 'state' : url.includes('pagesize') ? 'pagesize' : 'status';
      expect(res.json()).toEqual({
        error: `Invalid query parameters: unknown parameter "${unknown}" (this route takes ${takes})`,
        code: 'invalid_request',
      });
    }
    // Their own parameters still work, a repeated filter included.
    expect((await get(`/vendors/v1/webhooks/${webhookId}/dead-letters?limit=5`)).statusCode).toBe(200);
    expect(
      (await get('/rental/v1/machines?filter=gpu_name:h100&filter=memory_size:8&page=1&page_size=5')).statusCode,
    ).toBe(200);
  });
});
