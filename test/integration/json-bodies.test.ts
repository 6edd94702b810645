import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EVENTS_BODY_LIMIT_BYTES } from '../../src/admin/routes/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { readModelsProjected } from '../helpers/read-models.js';

/** Bytes that are not UTF-8: a lead byte with a bad continuation, then an encoded surrogate. */
const INVALID_UTF8 = Buffer.from([0xc3, 0x28, 0xed, 0xa0, 0x80]);
const NOT_UTF8 = { error: 'The request body is not valid UTF-8; JSON must be UTF-8 (RFC 8259)', code: 'invalid_json' };

/** A JSON text with `bytes` spliced in where `marker` stands. */
function withBytes(json: string, marker: string, bytes: Buffer): Buffer {
  const [before, after] = json.split(marker) as [string, string];
  return Buffer.concat([Buffer.from(before, 'utf8'), bytes, Buffer.from(after, 'utf8')]);
}

describe('JSON bodies must be UTF-8 (RFC 8259 §8.1)', () => {
  let t: TestApp;
  let vendorKey: string;
  let producerKey: string;

  beforeEach(async () => {
    t = await testApp();
    vendorKey = await t.keyFor(['vendor'], 'v-utf8');
    producerKey = await t.keyFor(['events:write']);
  });
  afterEach(async () => t.close());

  const send = (
    method: 'POST' | 'PATCH',
    url: string,
    key: string,
    payload: Buffer | string,
    contentType = 'application/json',
  ) => t.app.inject({ method, url, headers: { 'x-api-key': key, 'content-type': contentType }, payload });

  it('answers 400 invalid_json to a webhook registration with invalid UTF-8 in secret or callback_url, and stores nothing', async () => {
    const inSecret = withBytes(
      '{"event_type":"EVENT_TYPE_MACHINE_CREATED","callback_url":"https://a.example/h","secret":"s-@@"}',
      '@@',
      INVALID_UTF8,
    );
    const inUrl = withBytes(
      '{"event_type":"EVENT_TYPE_MACHINE_CREATED","callback_url":"https://a.example/@@"}',
      '@@',
      INVALID_UTF8,
    );
    const lone = withBytes(
      '{"event_type":"EVENT_TYPE_MACHINE_CREATED","callback_url":"https://a.example/h","secret":"@@"}',
      '@@',
      Buffer.from([0xff]),
    );
    for (const payload of [inSecret, inUrl, lone]) {
      const res = await send('POST', '/vendors/v1/webhooks', vendorKey, payload);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual(NOT_UTF8);
    }
    // With a charset parameter too.
    const charset = await send('POST', '/vendors/v1/webhooks', vendorKey, inSecret, 'application/json; charset=utf-8');
    expect(charset.json()).toEqual(NOT_UTF8);
    expect(await t.webhooks.list('v-utf8')).toEqual([]);
    expect(await t.redis.hlen(t.keys.webhooks.byId)).toBe(0);
  });

  it('answers 400 invalid_json to a PATCH with invalid UTF-8 and changes nothing', async () => {
    const created = await send(
      'POST',
      '/vendors/v1/webhooks',
      vendorKey,
      JSON.stringify({ event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/h', secret: 'keep' }),
    );
    const id = created.json<{ webhook_id: string }>().webhook_id;
    const res = await send(
      'PATCH',
      `/vendors/v1/webhooks/${id}`,
      vendorKey,
      withBytes('{"secret":"new-@@"}', '@@', INVALID_UTF8),
    );
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual(NOT_UTF8);
    expect(await t.webhooks.getById(id)).toMatchObject({
      secret: 'keep',
      callbackUrl: 'https://a.example/h',
      previousSecret: undefined,
    });
  });

  it('answers 400 invalid_json to an ingest request (one event or a batch) with invalid UTF-8, and ingests none of it', async () => {
    const eventId = randomUUID();
    const event = `{"event_id":"${eventId}","event_type":"EVENT_TYPE_MACHINE_CREATED","vendor_id":"v-utf8","data":{"status":"available","metadata":{"machine_id":"m-utf8","cuda_version":"@@"}}}`;
    const otherId = randomUUID();
    const valid = JSON.stringify({
      event_id: otherId,
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      vendor_id: 'v-utf8',
      data: { status: 'available', metadata: { machine_id: 'm-fine' } },
    });
    for (const payload of [
      withBytes(event, '@@', INVALID_UTF8),
      withBytes(`{"events":[${valid},${event}]}`, '@@', INVALID_UTF8),
    ]) {
      const res = await send('POST', '/internal/v1/events', producerKey, payload);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual(NOT_UTF8);
    }
    expect(await t.dedupe.seen([eventId, otherId], Date.now())).toEqual([false, false]);
    await readModelsProjected(t.redis, t.keys);
    expect(await t.machines.get('m-utf8')).toBeUndefined();
    expect(await t.machines.get('m-fine')).toBeUndefined();
  });

  it('keeps valid multi-byte UTF-8 exactly: é, 🚀, CJK', async () => {
    const secret = 'clé-🚀-秘密の鍵';
    const created = await send(
      'POST',
      '/vendors/v1/webhooks',
      vendorKey,
      Buffer.from(
        JSON.stringify({ event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/h', secret }),
        'utf8',
      ),
    );
    expect(created.statusCode).toBe(201);
    const listed = await t.app.inject({
      method: 'GET',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': vendorKey },
    });
    expect(listed.json<{ webhooks: { secret: string }[] }>().webhooks[0]?.secret).toBe(secret);

    const gpu = 'NVIDIA GeForce RTX 4090 — édition 🚀 显卡';
    const ingested = await send(
      'POST',
      '/internal/v1/events',
      producerKey,
      Buffer.from(
        JSON.stringify({
          event_type: 'EVENT_TYPE_MACHINE_CREATED',
          vendor_id: 'v-utf8',
          data: {
            status: 'available',
            metadata: { machine_id: 'm-utf8-ok' },
            hardware_specs: { gpus: [{ name: gpu }] },
          },
        }),
        'utf8',
      ),
    );
    expect(ingested.statusCode).toBe(202);
    await readModelsProjected(t.redis, t.keys);
    expect((await t.machines.get('m-utf8-ok'))?.hardware_specs?.gpus?.[0]?.name).toBe(gpu);
  });

  it('keeps the empty-body, malformed-JSON, 413 and 415 answers', async () => {
    const empty = await send('POST', '/vendors/v1/webhooks', vendorKey, '');
    expect(empty.statusCode).toBe(400);
    expect(empty.json<{ code: string }>().code).toBe('invalid_json');
    const malformed = await send('POST', '/internal/v1/events', producerKey, '{"event_type":');
    expect(malformed.json()).toEqual({ error: 'The request body is not valid JSON', code: 'invalid_json' });
    const text = await send('POST', '/vendors/v1/webhooks', vendorKey, '{}', 'text/plain');
    expect(text.statusCode).toBe(415);
    // The server-wide 1 MiB limit, and the ingest route's own 5 MiB.
    const big = await send(
      'POST',
      '/vendors/v1/webhooks',
      vendorKey,
      JSON.stringify({ secret: 'x'.repeat(1024 * 1024) }),
    );
    expect(big.statusCode).toBe(413);
    const events = Array.from({ length: 1000 }, (_, i) => ({
      event_type: 'TASK_UPDATED',
      data: { task_id: randomUUID(), status: 'failed', fail_reason: `${i}`.padEnd(2_000, 'é') },
    }));
    const large = JSON.stringify({ events });
    expect(Buffer.byteLength(large)).toBeGreaterThan(2 * 1024 * 1024);
    expect(Buffer.byteLength(large)).toBeLessThan(EVENTS_BODY_LIMIT_BYTES);
    expect((await send('POST', '/internal/v1/events', producerKey, large)).statusCode).toBe(202);
    const tooLarge = await send(
      'POST',
      '/internal/v1/events',
      producerKey,
      JSON.stringify({ events: [{ event_type: 'TASK_UPDATED', pad: 'x'.repeat(EVENTS_BODY_LIMIT_BYTES) }] }),
    );
    expect(tooLarge.statusCode).toBe(413);
  });
});
