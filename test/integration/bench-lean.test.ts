import { randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeanPipeline, type LeanOptions } from '../../bench/lean.js';
import { TestReceiver } from '../helpers/receiver.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const EVENT_TYPE = 'EVENT_TYPE_DEPLOYMENT_UPDATED';
const secretOf = (i: number) =>
  `whsec_${Buffer.from(`lean-bench-secret-number-${i}-of-32-bytes`.slice(0, 32)).toString('base64')}`;

function event(vendor: number, id = randomUUID()) {
  return {
    event_id: id,
    event_type: EVENT_TYPE,
    vendor_id: `vendor-${vendor}`,
    data: { deployment_id: `dep-${vendor}`, status: 'STATUS_RUNNING' },
  };
}

async function postRaw(lean: LeanPipeline, body: string, method: 'POST' | 'GET' = 'POST') {
  const response = await request(`${lean.origin}/events`, {
    method,
    headers: { 'content-type': 'application/json' },
    ...(method === 'POST' ? { body } : {}),
  });
  return { status: response.statusCode, body: (await response.body.json()) as Record<string, unknown> };
}

describe('the bench’s lean pipeline (real Redis, real receiver)', () => {
  let r: TestRedis;
  let receiver: TestReceiver;
  const started: LeanPipeline[] = [];

  beforeEach(async () => {
    r = testRedis();
    receiver = new TestReceiver();
    await receiver.start();
  });
  afterEach(async () => {
    for (const lean of started.splice(0)) await lean.close();
    await receiver.close();
    await r.cleanup();
  });

  async function start(options: Partial<LeanOptions> = {}): Promise<LeanPipeline> {
    const lean = await LeanPipeline.start({
      redisUrl: r.url,
      prefix: `${r.prefix}:lean`,
      eventType: EVENT_TYPE,
      webhooks: [0, 1, 2].map((i) => ({ vendorId: `vendor-${i}`, url: `${receiver.base}/v${i}`, secret: secretOf(i) })),
      inFlight: 5,
      producerConnections: 2,
      ...options,
    });
    started.push(lean);
    return lean;
  }

  const streamLength = () => r.redis.xlen(`{${r.prefix}:lean}:stream`);

  it('delivers each event once, signed with its webhook’s key, and leaves nothing pending', async () => {
    const lean = await start();
    const events = Array.from({ length: 250 }, (_, n) => event(n % 3));
    for (let i = 0; i < events.length; i += 100) {
      const batch = events.slice(i, i + 100);
      await lean.post(JSON.stringify({ events: batch }), batch.length);
    }
    await waitFor(() => receiver.requests.length >= events.length, 10_000, 'every event received');
    await waitFor(
      async () => (await lean.pending()) === 0 && (await streamLength()) === 0,
      5_000,
      'every entry acknowledged and deleted',
    );

    expect(receiver.requests).toHaveLength(events.length);
    for (const received of receiver.requests) {
      const vendor = Number(received.path.slice(2));
      const verified = new StandardWebhook(secretOf(vendor)).verify(
        received.body,
        received.headers as Record<string, string>,
      ) as Record<string, unknown>;
      const sent = events.find((e) => e.event_id === received.headers['webhook-id'])!;
      expect(sent.vendor_id).toBe(`vendor-${vendor}`);
      expect(verified).toMatchObject({
        version: '1.0',
        event_id: sent.event_id,
        event_type: EVENT_TYPE,
        data: sent.data,
      });
    }
    expect(new Set(receiver.requests.map((q) => q.headers['webhook-id'])).size).toBe(events.length);
    expect(await r.redis.llen(`{${r.prefix}:lean}:log`)).toBe(events.length);
  });

  it('answers a re-sent event id as a duplicate and does not deliver it again', async () => {
    const lean = await start();
    const first = event(0);
    await lean.post(JSON.stringify({ events: [first] }), 1);
    const second = event(1);
    const again = await postRaw(lean, JSON.stringify({ events: [first, second, second] }));
    expect(again).toEqual({ status: 202, body: { accepted: 1, duplicates: [0, 2], rejected: [] } });
    await waitFor(() => receiver.at('/v1').length === 1, 5_000, 'the new event received');
    // Nothing is left to send once the stream is empty: a duplicate never entered it.
    await waitFor(
      async () => (await streamLength()) === 0 && (await lean.pending()) === 0,
      5_000,
      'the stream drained',
    );
    expect(receiver.at('/v0')).toHaveLength(1);
    expect(receiver.at('/v1')).toHaveLength(1);
  });

  it('answers bad input with a clear 4xx and accepts the valid events of a batch', async () => {
    const lean = await start();
    expect(await postRaw(lean, 'not json')).toEqual({ status: 400, body: { error: 'the body is not JSON' } });
    expect((await postRaw(lean, '{"events":[]}')).status).toBe(400);
    expect((await postRaw(lean, 'null')).status).toBe(400);
    expect(
      (await postRaw(lean, JSON.stringify({ events: Array.from({ length: 1_001 }, () => event(0)) }))).status,
    ).toBe(400);
    expect((await postRaw(lean, '', 'GET')).status).toBe(404);
    const huge = await postRaw(
      lean,
      JSON.stringify({ events: [{ ...event(0), data: { pad: 'x'.repeat(5 * 1024 * 1024) } }] }),
    );
    expect(huge.status).toBe(413);

    const good = event(2);
    const mixed = await postRaw(
      lean,
      JSON.stringify({ events: [good, { ...event(0), event_id: 'not-a-uuid' }, { ...event(0), data: [] }, 7] }),
    );
    expect(mixed.status).toBe(202);
    expect(mixed.body).toMatchObject({ accepted: 1, duplicates: [] });
    expect(
      (mixed.body.rejected as { index: number; reason: string }[]).map(({ index, reason }) => [
        index,
        reason.split(' ')[0],
      ]),
    ).toEqual([
      [1, 'event_id'],
      [2, 'data'],
      [3, 'an'],
    ]);
    await waitFor(() => receiver.at('/v2').length === 1, 5_000, 'the valid event delivered');
    expect(receiver.at('/v2')[0]!.headers['webhook-id']).toBe(good.event_id);
  });

  it('keeps a failed delivery pending and sends it again', async () => {
    receiver.script('/v1', { status: 500 }, { status: 204 });
    const lean = await start({ retryAfterMs: 50 });
    const failing = event(1);
    await lean.post(JSON.stringify({ events: [failing] }), 1);
    await waitFor(() => receiver.at('/v1').length === 2, 5_000, 'the retry');
    await waitFor(async () => (await lean.pending()) === 0, 5_000, 'the entry acknowledged after the retry');
    expect(await r.redis.lrange(`{${r.prefix}:lean}:log`, 0, -1)).toEqual([
      expect.stringMatching(new RegExp(`^${failing.event_id} 1 500 \\d+$`)),
      expect.stringMatching(new RegExp(`^${failing.event_id} 2 204 \\d+$`)),
    ]);
  });

  it('delivers the entries a stopped pipeline had read when the next one starts on the prefix', async () => {
    receiver.script('/v0', 'hang');
    const crashed = await start();
    const events = Array.from({ length: 4 }, () => event(0));
    await crashed.post(JSON.stringify({ events }), events.length);
    await waitFor(() => receiver.at('/v0').length === events.length, 5_000, 'every event in flight');
    await crashed.close();
    started.splice(started.indexOf(crashed), 1);
    expect(await r.redis.xlen(`{${r.prefix}:lean}:stream`)).toBe(events.length);

    receiver.script('/v0', { status: 204 });
    const next = await start();
    await waitFor(() => receiver.at('/v0').length === 2 * events.length, 5_000, 'the pending entries sent again');
    await waitFor(async () => (await next.pending()) === 0, 5_000, 'the pending entries acknowledged');
    const resent = receiver
      .at('/v0')
      .slice(events.length)
      .map((q) => q.headers['webhook-id']);
    expect(resent.sort()).toEqual(events.map((e) => e.event_id).sort());
  });
});
