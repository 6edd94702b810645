import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EVENTS_BODY_LIMIT_BYTES } from '../../src/admin/routes/events.js';
import { EVENT_BATCH_SIZE_MAX } from '../../src/domain/event.js';
import { isUuid } from '../../src/domain/ids.js';
import {
  HooklineProducer,
  HooklinePublishError,
  parseRetryAfterMs,
  PRODUCER_BATCH_BYTES_DEFAULT,
  PRODUCER_BATCH_SIZE_MAX,
  producerRetryDelayMs,
  type HooklineProducerOptions,
  type ProducerEvent,
} from '@hookline/producer';

interface Received {
  headers: IncomingMessage['headers'];
  events: { event_id: string; event_type: string }[];
  atMs: number;
}

type Answer = (res: ServerResponse, received: Received) => void;

/** Answers 202 with an accepted result per event, as Hookline does. */
const accept: Answer = (res, received) => {
  res.writeHead(202, { 'content-type': 'application/json' });
  const results = received.events.map((e) => ({ event_id: e.event_id, status: 'accepted', deliveries: 1 }));
  res.end(JSON.stringify({ results, accepted: results.length, duplicates: 0, rejected: 0 }));
};
const status =
  (code: number, headers: Record<string, string> = {}): Answer =>
  (res) => {
    res.writeHead(code, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify({ error: `scripted ${code}`, code: 'scripted' }));
  };
/** Drops the connection without an answer: a network error for the client. */
const hangUp: Answer = (res) => res.socket?.destroy();

/** A real HTTP server on 127.0.0.1 whose answers each test scripts, in order (then 202s). */
let server: Server;
let baseUrl: string;
let script: Answer[];
let received: Received[];

beforeEach(async () => {
  script = [];
  received = [];
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { events: Received['events'] };
      const entry = { headers: req.headers, events: body.events, atMs: Date.now() };
      received.push(entry);
      (script.shift() ?? accept)(res, entry);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterEach(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const producer = (options: Partial<HooklineProducerOptions> = {}) =>
  new HooklineProducer({ baseUrl, apiKey: 'hk_test', retryBaseMs: 5, ...options });

const TASK_ID = '9b2e4c1a-7d3f-4e8a-b6c5-1f0a2d3e4b5c';
const GIVEN_ID = '3f6c1b2a-9d4e-4c7b-8a1f-2e5d6c7b8a90';
const taskEvent = (extra: Partial<ProducerEvent> = {}): ProducerEvent =>
  ({
    event_type: 'TASK_UPDATED',
    data: { task_id: TASK_ID, status: 'pending', fail_reason: null },
    ...extra,
  }) as ProducerEvent;

describe('HooklineProducer', () => {
  it('posts the events with the API key and resolves with the results', async () => {
    const results = await producer().publish([taskEvent({ event_id: GIVEN_ID }), taskEvent()]);
    expect(received).toHaveLength(1);
    expect(received[0]!.headers['x-api-key']).toBe('hk_test');
    expect(received[0]!.headers['content-type']).toBe('application/json');
    const [given, assigned] = received[0]!.events;
    expect(given!.event_id).toBe(GIVEN_ID);
    expect(isUuid(assigned!.event_id)).toBe(true);
    expect(results).toEqual(
      received[0]!.events.map((e) => ({ event_id: e.event_id, status: 'accepted', deliveries: 1 })),
    );
  });

  it('sends the caller’s trace context as traceparent and tracestate, on every request and retry', async () => {
    script = [status(503), accept];
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    await producer().publish([taskEvent()], { traceparent, tracestate: 'vendor=abc' });
    expect(received.map((r) => [r.headers.traceparent, r.headers.tracestate])).toEqual([
      [traceparent, 'vendor=abc'],
      [traceparent, 'vendor=abc'],
    ]);
    await producer().publish([taskEvent()]);
    expect(received[2]!.headers.traceparent).toBeUndefined();
  });

  it('retries 503, 429 and network errors with the same event ids', async () => {
    script = [status(503), hangUp, status(429), accept];
    const events = [taskEvent(), taskEvent(), taskEvent({ event_id: GIVEN_ID })];
    const results = await producer().publish(events);
    // The server saw every attempt, the dropped one included.
    expect(received).toHaveLength(4);
    const idsOf = (r: Received) => r.events.map((e) => e.event_id);
    for (const attempt of received.slice(1)) expect(idsOf(attempt)).toEqual(idsOf(received[0]!));
    expect(results.map((r) => r.event_id)).toEqual(idsOf(received[0]!));
    // The caller's objects are left as they were.
    expect(events[0]).not.toHaveProperty('event_id');
  });

  it('waits at least as long as Retry-After says', async () => {
    script = [status(429, { 'retry-after': '1' })];
    await producer().publish([taskEvent()]);
    expect(received).toHaveLength(2);
    expect(received[1]!.atMs - received[0]!.atMs).toBeGreaterThanOrEqual(950);
  });

  it('does not retry a 400 and reports the server’s message', async () => {
    script = [status(400)];
    const error = await producer()
      .publish([taskEvent()])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HooklinePublishError);
    expect(error).toMatchObject({ status: 400, retryable: false, message: 'Hookline answered 400: scripted 400' });
    expect(received).toHaveLength(1);
  });

  it('resolves with the results when Hookline rejected every event of a batch (400 events_rejected), and goes on with the next batch', async () => {
    const rejectAll: Answer = (res, got) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      const results = got.events.map((e) => ({
        event_id: e.event_id,
        status: 'rejected',
        reason: 'data.task_id: task_id must be a UUID',
      }));
      res.end(
        JSON.stringify({
          error: 'All 2 events were rejected (see results)',
          code: 'events_rejected',
          results,
          accepted: 0,
          duplicates: 0,
          rejected: 2,
        }),
      );
    };
    script = [rejectAll];
    const results = await producer({ batchSize: 2 }).publish([taskEvent(), taskEvent(), taskEvent()]);
    expect(received.map((r) => r.events.length)).toEqual([2, 1]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'accepted']);
    expect(results[0]).toMatchObject({
      event_id: received[0]!.events[0]!.event_id,
      reason: 'data.task_id: task_id must be a UUID',
    });
  });

  it('gives up after maxRetries retries', async () => {
    script = [status(500), status(502), status(503), status(504)];
    const error = (await producer({ maxRetries: 2 })
      .publish([taskEvent()])
      .catch((e: unknown) => e)) as HooklinePublishError;
    expect(error).toMatchObject({ status: 503, retryable: true });
    expect(received).toHaveLength(3);
  });

  it('splits into batches of batchSize and keeps the order of results', async () => {
    const events = Array.from({ length: 5 }, (_, i) =>
      taskEvent({ event_id: `00000000-0000-4000-8000-00000000000${i}` }),
    );
    const results = await producer({ batchSize: 2 }).publish(events);
    expect(received.map((r) => r.events.length)).toEqual([2, 2, 1]);
    expect(results.map((r) => r.event_id)).toEqual(events.map((e) => e.event_id));
  });

  it('splits batches that would exceed maxBatchBytes', async () => {
    const events = Array.from({ length: 4 }, () =>
      taskEvent({ data: { task_id: TASK_ID, status: 'failed', fail_reason: 'x'.repeat(400) } }),
    );
    // Each event is about 560 bytes as JSON: two fit in 1400 bytes, three do not.
    await producer({ maxBatchBytes: 1_400 }).publish(events);
    expect(received.map((r) => r.events.length)).toEqual([2, 2]);
  });

  it('reports the accepted batches and every event id when a later batch fails', async () => {
    script = [accept, status(422)];
    const error = (await producer({ batchSize: 2 })
      .publish([taskEvent(), taskEvent(), taskEvent()])
      .catch((e: unknown) => e)) as HooklinePublishError;
    expect(error).toBeInstanceOf(HooklinePublishError);
    expect(error.results.map((r) => r.event_id)).toEqual(received[0]!.events.map((e) => e.event_id));
    expect(error.events.map((e) => e.event_id)).toEqual(
      [...received[0]!.events, ...received[1]!.events].map((e) => e.event_id),
    );
  });

  it('refuses a batch size beyond the server’s limit', () => {
    expect(() => producer({ batchSize: 1001 })).toThrow(RangeError);
    expect(() => producer({ batchSize: 0 })).toThrow(RangeError);
  });

  it('stays within the server’s limits', () => {
    expect(PRODUCER_BATCH_SIZE_MAX).toBe(EVENT_BATCH_SIZE_MAX);
    expect(PRODUCER_BATCH_BYTES_DEFAULT).toBeLessThan(EVENTS_BODY_LIMIT_BYTES);
  });
});

describe('producer retry timing', () => {
  const base = { baseMs: 100, maxMs: 10_000 };

  it('doubles per retry with jitter between 50 % and 100 %, capped', () => {
    expect([1, 2, 3, 4].map((retry) => producerRetryDelayMs(retry, { ...base, random: () => 1 }))).toEqual([
      100, 200, 400, 800,
    ]);
    expect([1, 2, 3, 4].map((retry) => producerRetryDelayMs(retry, { ...base, random: () => 0 }))).toEqual([
      50, 100, 200, 400,
    ]);
    expect(producerRetryDelayMs(20, { ...base, random: () => 1 })).toBe(10_000);
  });

  it('never retries sooner than Retry-After, and caps it', () => {
    expect(producerRetryDelayMs(1, { ...base, random: () => 0, retryAfterMs: 3_000 })).toBe(3_000);
    expect(producerRetryDelayMs(1, { ...base, random: () => 0, retryAfterMs: 60_000 })).toBe(10_000);
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    const now = Date.UTC(2024, 4, 1, 12);
    expect(parseRetryAfterMs('7', now)).toBe(7_000);
    expect(parseRetryAfterMs('Wed, 01 May 2024 12:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfterMs('Wed, 01 May 2024 11:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfterMs('soon', now)).toBeUndefined();
    expect(parseRetryAfterMs(null, now)).toBeUndefined();
  });
});
