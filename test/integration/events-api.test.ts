import { connect, type AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EVENTS_BODY_LIMIT_BYTES } from '../../src/admin/routes/events.js';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { firstAttemptBatches } from '../helpers/first-attempts.js';
import { sampleEvent } from '../helpers/ingest-app.js';

const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const URL = '/internal/v1/events';

interface Answer {
  results: { event_id?: string; status: string; reason?: string; deliveries?: number }[];
  accepted: number;
  duplicates: number;
  rejected: number;
}

let t: TestApp;
let key: string;

beforeEach(async () => {
  t = await testApp();
  key = await t.keyFor(['events:write']);
});
afterEach(async () => {
  await t.close();
});

/** Registers a webhook of `vendorId` for `eventType` and returns its id. */
async function subscribe(vendorId: string, eventType: WebhookEventType): Promise<string> {
  const created = await t.webhooks.create(vendorId, {
    eventType,
    callbackUrl: `https://receiver.example/${vendorId}/${eventType}`,
  });
  if (!created.ok) throw new Error(`webhook for ${vendorId} ${eventType} already exists`);
  return created.webhook.id;
}

/** Every delivery ingest queued (no worker runs: they wait in the first-attempt streams). */
async function queued(): Promise<DeliverJob[]> {
  return (await firstAttemptBatches(t)).flat();
}

/** `apiKey` null sends no key. */
const post = (payload: unknown, apiKey: string | null = key) =>
  t.app.inject({
    method: 'POST',
    url: URL,
    headers: { 'content-type': 'application/json', ...(apiKey === null ? {} : { 'x-api-key': apiKey }) },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });

describe('POST /internal/v1/events', () => {
  it('accepts a single event object with 202 and a result', async () => {
    const webhookId = await subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const res = await post(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) }));
    expect(res.statusCode).toBe(202);
    expect(res.json()).toEqual({
      results: [{ event_id: id(1), status: 'accepted', deliveries: 1 }],
      accepted: 1,
      duplicates: 0,
      rejected: 0,
    });
    expect((await queued()).map((r) => r.webhookId)).toEqual([webhookId]);
  });

  it('answers a batch with a result per event: valid ones accepted, invalid ones rejected, repeats duplicate', async () => {
    await subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_UPDATED');
    const valid = sampleEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', 'v-1', { event_id: id(1) });
    const res = await post({
      events: [
        valid,
        {
          event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
          vendor_id: 'v-1',
          data: { deployment_id: 'd-1', status: 'STATUS_RUNNING' },
        },
        42,
        valid,
        { event_type: 'TASK_UPDATED', event_id: id(5), data: { task_id: id(9), status: 'pending', fail_reason: null } },
      ],
    });
    expect(res.statusCode).toBe(202);
    expect(res.json<Answer>()).toEqual({
      results: [
        { event_id: id(1), status: 'accepted', deliveries: 1 },
        { status: 'rejected', reason: 'data.machine_id: required' },
        { status: 'rejected', reason: 'the event must be a JSON object' },
        { event_id: id(1), status: 'duplicate' },
        { event_id: id(5), status: 'accepted', deliveries: 0 },
      ],
      accepted: 2,
      duplicates: 1,
      rejected: 2,
    });

    const again = await post({ events: [valid] });
    expect(again.json<Answer>()).toMatchObject({ accepted: 0, duplicates: 1, rejected: 0 });
    expect(await queued()).toHaveLength(1);
  });

  it('answers 400 events_rejected, with every result, when no event of the request was taken', async () => {
    const single = await post({
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      vendor: 'v-1',
      data: { status: 'available', metadata: { machine_id: 'm-1' } },
    });
    expect(single.statusCode).toBe(400);
    expect(single.json()).toEqual({
      error: 'The event was rejected: unknown field "vendor"; vendor_id: required',
      code: 'events_rejected',
      results: [{ status: 'rejected', reason: 'unknown field "vendor"; vendor_id: required' }],
      accepted: 0,
      duplicates: 0,
      rejected: 1,
    });
    const batch = await post({
      events: [
        {
          event_type: 'TASK_UPDATED',
          event_id: id(7),
          data: { task_id: 'nope', status: 'pending', fail_reason: null },
        },
        42,
      ],
    });
    expect(batch.statusCode).toBe(400);
    expect(batch.json()).toMatchObject({
      error: 'All 2 events were rejected (see results); the first: data.task_id: task_id must be a UUID',
      code: 'events_rejected',
      results: [
        { event_id: id(7), status: 'rejected', reason: 'data.task_id: task_id must be a UUID' },
        { status: 'rejected', reason: 'the event must be a JSON object' },
      ],
      rejected: 2,
    });
    expect(await t.dedupe.seen([id(7)], Date.now())).toEqual([false]);

    // A duplicate beside a rejected event: something was taken (earlier), so the answer stays 202.
    const valid = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(8) });
    expect((await post(valid)).statusCode).toBe(202);
    const mixed = await post({ events: [valid, 42] });
    expect(mixed.statusCode).toBe(202);
    expect(mixed.json<Answer>()).toMatchObject({ accepted: 0, duplicates: 1, rejected: 1 });
  });

  it('rejects a poison event nested 20,000 levels deep alone, with a reason, and accepts the rest of its batch', async () => {
    const webhookId = await subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const valid = JSON.stringify(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) }));
    const levels = 20_000;
    const poison = JSON.stringify(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) })).replace(
      '"data":{',
      `"data":{"deep":${'['.repeat(levels)}1${']'.repeat(levels)},`,
    );
    expect(poison.length).toBeGreaterThan(40_000);
    const res = await post(`{"events":[${valid},${poison}]}`);
    expect(res.statusCode, res.body).toBe(202);
    expect(res.json<Answer>()).toEqual({
      results: [
        { event_id: id(1), status: 'accepted', deliveries: 1 },
        {
          event_id: id(2),
          status: 'rejected',
          reason: 'data: nested more than 64 levels deep (objects and arrays within one another)',
        },
      ],
      accepted: 1,
      duplicates: 0,
      rejected: 1,
    });
    expect((await queued()).map((r) => [r.eventId, r.webhookId])).toEqual([[id(1), webhookId]]);
    expect(await t.dedupe.seen([id(1), id(2)], Date.now())).toEqual([true, false]);
  });

  it('answers 401 without a valid key and 403 without the events:write role', async () => {
    const event = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1');
    for (const res of [await post(event, null), await post(event, 'hk_not-a-real-key')]) {
      expect(res.statusCode).toBe(401);
      expect(res.json()).toMatchObject({ code: 'unauthorized' });
    }
    const res = await post(event, await t.keyFor(['vendor', 'machines:read']));
    expect(res.statusCode).toBe(403);
    expect(res.json()).toEqual({ error: 'This API key does not have the events:write role', code: 'forbidden' });
    expect(await queued()).toEqual([]);
    expect(await post(event, await t.keyFor(['admin']))).toMatchObject({ statusCode: 202 });
  });

  it('answers 400 naming the limit for more than 1000 events, and ingests none of them', async () => {
    const events = Array.from({ length: 1001 }, (_, i) =>
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(i + 1) }),
    );
    const res = await post({ events });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: 'Invalid request body: events: a batch holds at most 1000 events, got 1001; split it',
      code: 'invalid_request',
    });
    expect(await t.dedupe.seen([id(1)], Date.now())).toEqual([false]);

    const full = await post({ events: events.slice(0, 1000) });
    expect(full.statusCode).toBe(202);
    expect(full.json<Answer>().accepted).toBe(1000);
  });

  it('answers 400 naming a field beside "events" in a batch, and ingests none of it', async () => {
    const event = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) });
    const res = await post({ vendor_id: 'v-1', events: [event] });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: 'Invalid request body: unknown field "vendor_id" (a batch is { "events": [ … ] } alone)',
      code: 'invalid_request',
    });
    expect(await t.dedupe.seen([id(1)], Date.now())).toEqual([false]);
  });

  it('answers 400 for a body that is not an object or an events array', async () => {
    for (const [payload, message] of [
      ['[{"event_type":"TASK_UPDATED"}]', 'the body must be a JSON object'],
      ['"event"', 'the body must be a JSON object'],
      ['null', 'the body must be a JSON object'],
      [{ events: [] }, 'events must hold at least one event'],
      [{ events: { event_type: 'TASK_UPDATED' } }, 'events must be an array of event objects'],
    ] as const) {
      const res = await post(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(message);
    }
  });

  it('takes bodies beyond the server-wide 1 MiB default, up to 5 MiB', async () => {
    const events = Array.from({ length: 1000 }, (_, i) => ({
      event_id: id(i + 1),
      event_type: 'TASK_UPDATED',
      data: { task_id: id(i + 1), status: 'failed', fail_reason: 'e'.repeat(2_000) },
    }));
    const payload = JSON.stringify({ events });
    expect(payload.length).toBeGreaterThan(2 * 1024 * 1024);
    const res = await post(payload);
    expect(res.statusCode).toBe(202);
    expect(res.json<Answer>().accepted).toBe(1000);
  });

  it('answers 413 for a body over 5 MiB', async () => {
    const padding = 'x'.repeat(EVENTS_BODY_LIMIT_BYTES);
    const res = await post({ events: [{ event_type: 'TASK_UPDATED', padding }] });
    expect(res.statusCode).toBe(413);
    expect(await queued()).toEqual([]);
  });

  it('rejects an event over HOOKLINE_MAX_EVENT_BYTES (1 MiB by default) alone, with its reason; the rest of the request is ingested', async () => {
    await subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const large = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) });
    const res = await post({
      events: [
        { ...large, data: { ...large.data, notes: 'x'.repeat(1024 * 1024) } },
        sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }),
      ],
    });
    expect(res.statusCode).toBe(202);
    const [refused, taken] = res.json<Answer>().results;
    expect(refused).toMatchObject({ event_id: id(1), status: 'rejected' });
    expect(refused!.reason).toMatch(
      /^the event is 1,04\d,\d{3} bytes as delivered, over the limit of 1,048,576 \(HOOKLINE_MAX_EVENT_BYTES\)/,
    );
    expect(taken).toEqual({ event_id: id(2), status: 'accepted', deliveries: 1 });
    expect((await queued()).map((d) => d.eventId)).toEqual([id(2)]);
  });

  it('answers every oversized body with a 413 the producer can read, even one that writes it all before reading', async () => {
    // Many producers write the whole body before they read the answer. A 6 MB body is refused
    // before it is read (from its Content-Length, or at 5 MiB when chunked): closing the connection
    // with its bytes unread resets it, and the producer never sees the 413.
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = t.app.server.address() as AddressInfo;
    const body = Buffer.from(
      JSON.stringify({ events: [{ event_type: 'TASK_UPDATED', padding: 'x'.repeat(6_000_000) }] }),
    );
    const head = (framing: string) =>
      `POST ${URL} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-api-key: ${key}\r\n${framing}\r\n\r\n`;
    /** The status line and the JSON body's code, or the socket's error; reading starts once the request is written. */
    const send = (chunked: boolean) =>
      new Promise<string>((resolve) => {
        const socket = connect(port, '127.0.0.1');
        socket.pause();
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
        socket.on('error', (error: NodeJS.ErrnoException) => resolve(`${error.code} after ${text.length} bytes`));
        socket.on('end', () => resolve(`${text.split('\r\n')[0]} ${/"code":"(\w+)"/.exec(text)?.[1] ?? ''}`));
        socket.write(head(chunked ? 'transfer-encoding: chunked' : `content-length: ${body.length}`));
        if (chunked) socket.write(`${body.length.toString(16)}\r\n`);
        socket.write(body);
        socket.write(chunked ? '\r\n0\r\n\r\n' : '', () => socket.resume());
      });
    const answers: string[] = [];
    for (const chunked of [false, true])
      for (let round = 0; round < 2; round++)
        answers.push(...(await Promise.all(Array.from({ length: 6 }, () => send(chunked)))));
    const tally = answers.reduce<Record<string, number>>((counts, a) => ({ ...counts, [a]: (counts[a] ?? 0) + 1 }), {});
    console.log(`oversized bodies, written whole before reading: ${JSON.stringify(tally)}`);
    expect(tally).toEqual({ 'HTTP/1.1 413 Payload Too Large body_too_large': 24 });
    expect(await queued()).toEqual([]);
  });

  it('documents the event schema in OpenAPI', () => {
    const doc = t.app.swagger() as unknown as {
      paths: Record<string, Record<string, { requestBody: { content: Record<string, { schema: unknown }> } }>>;
      components: { schemas: Record<string, { oneOf?: unknown[]; anyOf?: unknown[] }> };
    };
    const body = JSON.stringify(doc.paths[URL]?.post?.requestBody.content['application/json']?.schema);
    // A request body is the input form of a schema: fields with defaults optional, unnamed data fields allowed.
    expect(body).toContain('"#/components/schemas/IngestEventInput"');
    expect(body).toContain('"maxItems":1000');
    const eventSchema = doc.components.schemas.IngestEventInput!;
    expect((eventSchema.oneOf ?? eventSchema.anyOf)?.length).toBe(7);
    expect(JSON.stringify(eventSchema)).toContain('"#/components/schemas/MachineInput"');
  });
});
