/**
 * The lean baseline: the smallest durable webhook pipeline we could write by hand, the floor that a
 * delivery engine's cost per delivery is held against (issue 23). It is the bench's own code and
 * shares nothing with Hookline's engine; a run gives it the same receiver, Redis and events.
 *
 * Ingest: `POST /events` with `{"events": [...]}`; each event's fields are checked by hand, its body
 * (the envelope a receiver gets) is built once, and the batch is deduplicated and appended to a
 * Redis stream by one script call, so an event is either marked and in the stream or neither. The
 * 202 goes out after that call: an accepted event is in Redis.
 *
 * Delivery, in the same process: a loop reads batches of up to 100 entries through a consumer group,
 * its own pending entries first (what a crashed process had read is sent again), signs each with the
 * webhook's HMAC key (decoded once), POSTs with undici over keep-alive with `inFlight` requests open,
 * and writes each batch's outcomes in one MULTI: delivered entries acknowledged and deleted, a line
 * per attempt on a capped log. A failed delivery stays pending and is sent again `retryAfterMs` later,
 * `attemptsMax` times in all.
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { sleep } from './measure.js';

interface LeanWebhook {
  vendorId: string;
  url: string;
  /** `whsec_<base64>` (the key is the decoded rest), else the key is the string's UTF-8 bytes. */
  secret: string;
}

export interface LeanOptions {
  redisUrl: string;
  /** The keys' hash tag. A pipeline started again on the same prefix takes over the pending entries of the one before. */
  prefix: string;
  /** The event type every vendor's one webhook subscribes to. */
  eventType: string;
  webhooks: readonly LeanWebhook[];
  /** Deliveries in flight. */
  inFlight: number;
  /** Connections of the producers' HTTP client (`post`). */
  producerConnections: number;
  retryAfterMs?: number;
  attemptsMax?: number;
  timeoutMs?: number;
}

/** Entries per stream read. */
const READ_COUNT = 100;
const READ_BLOCK_MS = 1_000;
const EVENTS_MAX = 1_000;
const BODY_BYTES_MAX = 4 * 1024 * 1024;
const DEDUPE_SECONDS = 24 * 60 * 60;
const LOG_LINES_MAX = 10_000;
const GROUP = 'lean';
const CONSUMER = 'lean-1';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * KEYS[1] the stream; ARGV[1] the dedupe window in seconds, ARGV[2] the marks' key prefix, then an
 * (event id, webhook index, body) triple per event. Answers the 0-based positions of the duplicates.
 */
const APPEND_LUA = `
local duplicates = {}
for i = 3, #ARGV, 3 do
  if redis.call('SET', ARGV[2] .. ARGV[i], '1', 'NX', 'EX', ARGV[1]) then
    redis.call('XADD', KEYS[1], '*', 'e', ARGV[i], 'w', ARGV[i + 1], 'b', ARGV[i + 2])
  else
    duplicates[#duplicates + 1] = (i - 3) / 3
  end
end
return duplicates`;

interface LeanEvent {
  event_id: string;
  event_type: string;
  vendor_id: string;
  timestamp?: string;
  data: object;
}

/** A checked event, or why it is rejected. */
function checkEvent(value: unknown): LeanEvent | string {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'an event is a JSON object';
  const event = value as Record<string, unknown>;
  if (typeof event.event_id !== 'string' || !UUID.test(event.event_id)) return 'event_id must be a UUID';
  if (typeof event.event_type !== 'string' || event.event_type === '' || event.event_type.length > 100)
    return 'event_type must be 1 to 100 characters';
  if (typeof event.vendor_id !== 'string' || event.vendor_id === '' || event.vendor_id.length > 200)
    return 'vendor_id must be 1 to 200 characters';
  if (
    event.timestamp !== undefined &&
    (typeof event.timestamp !== 'string' || Number.isNaN(Date.parse(event.timestamp)))
  ) {
    return 'timestamp must be an ISO 8601 date';
  }
  if (typeof event.data !== 'object' || event.data === null || Array.isArray(event.data))
    return 'data must be a JSON object';
  return event as unknown as LeanEvent;
}

/** The body a receiver gets; the event id is a checked UUID, so it needs no escaping. */
function envelopeOf(event: LeanEvent, acceptedAt: string): string {
  const timestamp = JSON.stringify(event.timestamp ?? acceptedAt);
  return `{"version":"1.0","event_id":"${event.event_id}","event_type":${JSON.stringify(event.event_type)},"timestamp":${timestamp},"data":${JSON.stringify(event.data)}}`;
}

function signatureOf(key: KeyObject, eventId: string, timestamp: string, body: string): string {
  return `v1,${createHmac('sha256', key).update(`${eventId}.${timestamp}.`).update(body).digest('base64')}`;
}

function reply(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

interface Target {
  pool: Pool;
  path: string;
  key: KeyObject;
}

/** The entries of one read (or one retry) whose outcomes are written together. */
interface Batch {
  remaining: number;
  /** Entries to acknowledge: delivered, or out of attempts. */
  done: string[];
  lines: string[];
}

interface Delivery {
  entryId: string;
  eventId: string;
  target: number;
  body: string;
  attempt: number;
  batch: Batch;
}

type StreamReply = [stream: string, entries: [id: string, fields: string[] | null][]][] | null;

export class LeanPipeline {
  private readonly stream: string;
  private readonly marks: string;
  private readonly log: string;
  private readonly targets: Target[];
  private readonly byVendor: Map<string, number>;
  private readonly producer: Pool;
  private readonly waiting: Delivery[] = [];
  private readonly retries = new Set<NodeJS.Timeout>();
  private active = 0;
  private roomFreed: (() => void) | undefined;
  private closed = false;
  private reading: Promise<void> = Promise.resolve();

  private constructor(
    private readonly options: LeanOptions,
    private readonly redis: Redis,
    private readonly reader: Redis,
    private readonly server: Server,
    private readonly pools: Map<string, Pool>,
  ) {
    const tag = `{${options.prefix}}`;
    this.stream = `${tag}:stream`;
    this.marks = `${tag}:dd:`;
    this.log = `${tag}:log`;
    this.targets = options.webhooks.map(({ url, secret }) => {
      const { origin, pathname, search } = new URL(url);
      const key = createSecretKey(
        secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8'),
      );
      return { pool: pools.get(origin)!, path: `${pathname}${search}`, key };
    });
    this.byVendor = new Map(options.webhooks.map(({ vendorId }, index) => [vendorId, index]));
    this.producer = new Pool(this.origin, { connections: options.producerConnections, pipelining: 1 });
  }

  /** Connects, creates the consumer group, listens on 127.0.0.1 and starts delivering. */
  static async start(options: LeanOptions): Promise<LeanPipeline> {
    const redis = new Redis(options.redisUrl, { connectionName: `${options.prefix}-app`, enableAutoPipelining: false });
    const reader = new Redis(options.redisUrl, {
      connectionName: `${options.prefix}-reader`,
      maxRetriesPerRequest: null,
    });
    redis.defineCommand('leanAppend', { numberOfKeys: 1, lua: APPEND_LUA });
    const timeoutMs = options.timeoutMs ?? 15_000;
    const pools = new Map<string, Pool>();
    for (const { url } of options.webhooks) {
      const { origin } = new URL(url);
      if (!pools.has(origin))
        pools.set(
          origin,
          new Pool(origin, { connections: options.inFlight, headersTimeout: timeoutMs, bodyTimeout: timeoutMs }),
        );
    }
    // Nothing can reach the server before its port is known, which is after the pipeline exists.
    const server = createServer((request, response) => pipeline.handle(request, response));
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
    const pipeline = new LeanPipeline(options, redis, reader, server, pools);
    try {
      await redis.xgroup('CREATE', pipeline.stream, GROUP, '0', 'MKSTREAM');
    } catch (error) {
      if (!(error instanceof Error && error.message.startsWith('BUSYGROUP'))) throw error;
    }
    pipeline.reading = pipeline.readBatches();
    return pipeline;
  }

  /** Where its ingest listens: `POST {origin}/events`. */
  get origin(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Every key of the pipeline, as a SCAN pattern. */
  get keyPattern(): string {
    return `{${this.options.prefix}}:*`;
  }

  /** Entries read and not yet acknowledged (in flight, or waiting for a retry). */
  async pending(): Promise<number> {
    const [count] = (await this.redis.xpending(this.stream, GROUP)) as [number, ...unknown[]];
    return count;
  }

  /** A producer's request: POSTs one `{events: [...]}` body; throws unless all `expected` events were accepted. */
  async post(body: string, expected: number): Promise<void> {
    const response = await this.producer.request({
      method: 'POST',
      path: '/events',
      headers: { 'content-type': 'application/json' },
      body,
    });
    const text = await response.body.text();
    if (response.statusCode !== 202)
      throw new Error(`lean ingest answered ${response.statusCode}: ${text.slice(0, 300)}`);
    const { accepted } = JSON.parse(text) as { accepted: number };
    if (accepted !== expected)
      throw new Error(`lean ingest accepted ${accepted} of ${expected} events: ${text.slice(0, 300)}`);
  }

  private handle(request: IncomingMessage, response: ServerResponse): void {
    if (request.method !== 'POST' || request.url !== '/events') {
      request.resume();
      reply(response, 404, { error: 'only POST /events is served' });
      return;
    }
    const chunks: Buffer[] = [];
    let bytes = 0;
    request.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes <= BODY_BYTES_MAX) chunks.push(chunk);
    });
    request.on('end', () => {
      if (bytes > BODY_BYTES_MAX) {
        reply(response, 413, { error: `the body is larger than ${BODY_BYTES_MAX} bytes` });
        return;
      }
      this.ingestBatch(Buffer.concat(chunks).toString('utf8')).then(
        ({ status, body }) => reply(response, status, body),
        () => reply(response, 503, { error: 'storage is unavailable, nothing was accepted' }),
      );
    });
  }

  private async ingestBatch(text: string): Promise<{ status: number; body: unknown }> {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return { status: 400, body: { error: 'the body is not JSON' } };
    }
    const events = (parsed as { events?: unknown } | null)?.events;
    if (!Array.isArray(events) || events.length === 0 || events.length > EVENTS_MAX) {
      return { status: 400, body: { error: `the body is {"events": [...]} with 1 to ${EVENTS_MAX} events` } };
    }
    const acceptedAt = new Date().toISOString();
    const args: string[] = [String(DEDUPE_SECONDS), this.marks];
    const positions: number[] = [];
    const rejected: { index: number; reason: string }[] = [];
    events.forEach((value: unknown, index) => {
      const event = checkEvent(value);
      if (typeof event === 'string') rejected.push({ index, reason: event });
      else {
        const target = event.event_type === this.options.eventType ? this.byVendor.get(event.vendor_id) : undefined;
        if (target === undefined) return;
        args.push(event.event_id, String(target), envelopeOf(event, acceptedAt));
        positions.push(index);
      }
    });
    const appended = this.redis as unknown as { leanAppend(stream: string, ...argv: string[]): Promise<number[]> };
    const duplicates =
      positions.length === 0 ? [] : (await appended.leanAppend(this.stream, ...args)).map((at) => positions[at]!);
    return {
      status: 202,
      body: { accepted: events.length - rejected.length - duplicates.length, duplicates, rejected },
    };
  }

  /** Resolves once fewer deliveries wait than are in flight, so the next read keeps the requests busy without piling up. */
  private room(): Promise<void> {
    if (this.waiting.length < this.options.inFlight) return Promise.resolve();
    return new Promise((resolve) => (this.roomFreed = resolve));
  }

  private async readBatches(): Promise<void> {
    // The consumer's own pending entries first: read before a crash and never acknowledged.
    let from = '0';
    while (!this.closed) {
      await this.room();
      let streams: StreamReply;
      try {
        streams = (await this.reader.xreadgroup(
          'GROUP',
          GROUP,
          CONSUMER,
          'COUNT',
          READ_COUNT,
          'BLOCK',
          READ_BLOCK_MS,
          'STREAMS',
          this.stream,
          from,
        )) as StreamReply;
      } catch {
        // Closed, or Redis away (ioredis reconnects and holds the next read until it is back).
        await sleep(100);
        continue;
      }
      const entries = streams?.[0]?.[1] ?? [];
      if (from !== '>') from = entries.at(-1)?.[0] ?? '>';
      if (entries.length > 0 && !this.closed) this.dispatch(entries);
    }
  }

  private dispatch(entries: [id: string, fields: string[] | null][]): void {
    const batch: Batch = { remaining: entries.length, done: [], lines: [] };
    for (const [entryId, fields] of entries) {
      // Fields are written in the order the append script gives them: e, w, b.
      if (fields === null) batch.done.push(entryId);
      else
        this.waiting.push({
          entryId,
          eventId: fields[1]!,
          target: Number(fields[3]),
          body: fields[5]!,
          attempt: 1,
          batch,
        });
    }
    batch.remaining = entries.length - batch.done.length;
    if (batch.remaining === 0) void this.recordBatch(batch);
    this.pump();
  }

  private pump(): void {
    while (this.active < this.options.inFlight && this.waiting.length > 0) {
      const delivery = this.waiting.shift()!;
      this.active += 1;
      void this.deliver(delivery).finally(() => {
        this.active -= 1;
        this.pump();
      });
    }
    if (this.roomFreed && this.waiting.length < this.options.inFlight) {
      const resolve = this.roomFreed;
      this.roomFreed = undefined;
      resolve();
    }
  }

  private async deliver(delivery: Delivery): Promise<void> {
    const target = this.targets[delivery.target]!;
    const startedMs = performance.now();
    let status: number | string;
    try {
      const timestamp = String(Math.floor(Date.now() / 1000));
      const response = await target.pool.request({
        method: 'POST',
        path: target.path,
        headers: {
          'content-type': 'application/json',
          'webhook-id': delivery.eventId,
          'webhook-timestamp': timestamp,
          'webhook-signature': signatureOf(target.key, delivery.eventId, timestamp, delivery.body),
        },
        body: delivery.body,
      });
      await response.body.dump();
      status = response.statusCode;
    } catch (error) {
      status = (error as { code?: string }).code ?? 'error';
    }
    if (this.closed) return;
    const { batch } = delivery;
    batch.lines.push(`${delivery.eventId} ${delivery.attempt} ${status} ${Math.round(performance.now() - startedMs)}`);
    const delivered = typeof status === 'number' && status >= 200 && status < 300;
    if (delivered || delivery.attempt >= (this.options.attemptsMax ?? 10)) batch.done.push(delivery.entryId);
    else this.retryLater(delivery);
    batch.remaining -= 1;
    if (batch.remaining === 0) void this.recordBatch(batch);
  }

  /** The entry stays pending meanwhile, so a crash before the retry loses nothing. */
  private retryLater(delivery: Delivery): void {
    const timer = setTimeout(() => {
      this.retries.delete(timer);
      this.waiting.push({ ...delivery, attempt: delivery.attempt + 1, batch: { remaining: 1, done: [], lines: [] } });
      this.pump();
    }, this.options.retryAfterMs ?? 5_000);
    this.retries.add(timer);
  }

  private async recordBatch(batch: Batch): Promise<void> {
    const multi = this.redis.multi();
    if (batch.done.length > 0) multi.xack(this.stream, GROUP, ...batch.done).xdel(this.stream, ...batch.done);
    if (batch.lines.length > 0) multi.rpush(this.log, ...batch.lines).ltrim(this.log, -LOG_LINES_MAX, -1);
    try {
      await multi.exec();
    } catch {
      // Unacknowledged, the entries stay pending: written again a little later, or sent again after a restart.
      if (this.closed) return;
      const timer = setTimeout(() => {
        this.retries.delete(timer);
        void this.recordBatch(batch);
      }, this.options.retryAfterMs ?? 5_000);
      this.retries.add(timer);
    }
  }

  /**
   * Stops at once, as a crash would but without losing an acknowledged write: requests in flight are
   * aborted and their entries stay pending for the next pipeline on the prefix. The keys stay.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.retries) clearTimeout(timer);
    this.retries.clear();
    this.waiting.length = 0;
    this.roomFreed?.();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.producer.close();
    await Promise.all([...this.pools.values()].map((pool) => pool.destroy()));
    this.reader.disconnect();
    await this.reading;
    await this.redis.quit();
  }
}
