/**
 * A small client for producer services that publish events to Hookline's `POST /internal/v1/events`.
 * No dependencies beyond Node's global fetch.
 */
import { randomUUID } from 'node:crypto';
import type { EventResult, ProducerEvent } from './events.js';

/** The server's batch limit (the engine's EVENT_BATCH_SIZE_MAX; its test suite keeps the two equal). */
export const PRODUCER_BATCH_SIZE_MAX = 1000;
/** Default largest request body; the server accepts up to 5 MiB. */
export const PRODUCER_BATCH_BYTES_DEFAULT = 4 * 1024 * 1024;

export interface HooklineProducerOptions {
  /** Where the admin API listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** An API key with the events:write role. */
  apiKey: string;
  /** Events per request, 1-1000; default 500. */
  batchSize?: number;
  /** Largest request body in bytes; a batch is split before it grows past this. Default 4 MiB. */
  maxBatchBytes?: number;
  /** Retries per request after network errors, 429 and 5xx; default 5. */
  maxRetries?: number;
  /** First retry delay; doubles per retry, with jitter. Default 200 ms. */
  retryBaseMs?: number;
  /** Longest retry delay, a Retry-After included. Default 30 s. */
  retryMaxMs?: number;
  /** Per-request timeout; a timeout is retried like a network error. Default 30 s. */
  timeoutMs?: number;
  /** Injectable fetch (tests, proxies); default the global fetch. */
  fetch?: typeof fetch;
}

/** A publish that did not complete: the accepted batches' results and every event with its id, for a safe re-send. */
export class HooklinePublishError extends Error {
  constructor(
    message: string,
    /** HTTP status of the last answer; undefined after a network error. */
    readonly status: number | undefined,
    /** Whether the last failure was of a retryable kind (the retries ran out). */
    readonly retryable: boolean,
    /** All events of the publish call, with their assigned ids: publishing these again is idempotent. */
    readonly events: readonly ProducerEvent[],
    /** Results of the batches accepted before the failure, in event order. */
    readonly results: readonly EventResult[],
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'HooklinePublishError';
  }
}

/** A failure of one request, before the publish call adds its context. */
class AttemptFailure extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The delay before retry number `retry` (1-based): `baseMs · 2^(retry-1)`, capped at `maxMs`, with
 * jitter drawn from [50 %, 100 %]; never shorter than a server's Retry-After (itself capped at `maxMs`).
 */
export function producerRetryDelayMs(
  retry: number,
  options: { baseMs: number; maxMs: number; retryAfterMs?: number; random: () => number },
): number {
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(retry - 1, 30));
  const jittered = Math.round(ceiling * (0.5 + options.random() / 2));
  return Math.min(options.maxMs, Math.max(jittered, options.retryAfterMs ?? 0));
}

/** A Retry-After header (seconds or an HTTP date) in ms from `nowMs`; undefined when absent or unreadable. */
export function parseRetryAfterMs(header: string | null, nowMs: number): number | undefined {
  if (header === null) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, at - nowMs) : undefined;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Publishes events to Hookline in batches, retrying what is safe to retry. */
export class HooklineProducer {
  private readonly url: string;
  private readonly apiKey: string;
  private readonly batchSize: number;
  private readonly maxBatchBytes: number;
  private readonly maxRetries: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;

  constructor(options: HooklineProducerOptions) {
    this.url = new URL('/internal/v1/events', options.baseUrl).toString();
    this.apiKey = options.apiKey;
    this.batchSize = options.batchSize ?? 500;
    this.maxBatchBytes = options.maxBatchBytes ?? PRODUCER_BATCH_BYTES_DEFAULT;
    this.maxRetries = options.maxRetries ?? 5;
    this.retryBaseMs = options.retryBaseMs ?? 200;
    this.retryMaxMs = options.retryMaxMs ?? 30_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetch = options.fetch ?? globalThis.fetch;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1 || this.batchSize > PRODUCER_BATCH_SIZE_MAX) {
      throw new RangeError(
        `batchSize must be a whole number from 1 to ${PRODUCER_BATCH_SIZE_MAX}, got ${this.batchSize}`,
      );
    }
    if (!Number.isInteger(this.maxRetries) || this.maxRetries < 0)
      throw new RangeError(`maxRetries must be a whole number ≥ 0, got ${this.maxRetries}`);
  }

  /**
   * Publishes `events` and resolves with one result per event, in order. Events without an
   * `event_id` get one before the first request, so every retry re-sends the same ids and Hookline
   * treats repeats as duplicates. Throws HooklinePublishError when a batch fails for good.
   * `trace`: the W3C Trace Context of the caller's span (what an OpenTelemetry propagator's
   * `inject` writes), sent as the `traceparent` and `tracestate` headers, so the events' ingest and
   * deliveries join the caller's trace.
   */
  async publish(
    events: readonly ProducerEvent[],
    trace?: { traceparent?: string; tracestate?: string },
  ): Promise<EventResult[]> {
    const identified: ProducerEvent[] = events.map((event) =>
      event.event_id === undefined ? { ...event, event_id: randomUUID() } : event,
    );
    const results: EventResult[] = [];
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-api-key': this.apiKey };
    if (trace?.traceparent) headers.traceparent = trace.traceparent;
    if (trace?.traceparent && trace.tracestate) headers.tracestate = trace.tracestate;
    for (const batch of this.batches(identified)) {
      try {
        results.push(...(await this.send(batch, headers)));
      } catch (error) {
        const failure = error instanceof AttemptFailure ? error : new AttemptFailure(String(error), undefined, false);
        throw new HooklinePublishError(failure.message, failure.status, failure.retryable, identified, results, {
          cause: failure.cause ?? error,
        });
      }
    }
    return results;
  }

  /** Splits into request bodies of at most batchSize events and maxBatchBytes bytes (an oversized event goes alone). */
  private *batches(events: readonly ProducerEvent[]): Generator<{ body: string; count: number }> {
    const framing = Buffer.byteLength('{"events":[]}');
    let parts: string[] = [];
    let bytes = framing;
    const flush = () => {
      const batch = { body: `{"events":[${parts.join(',')}]}`, count: parts.length };
      parts = [];
      bytes = framing;
      return batch;
    };
    for (const event of events) {
      const json = JSON.stringify(event);
      const size = Buffer.byteLength(json) + 1;
      if (parts.length > 0 && (parts.length >= this.batchSize || bytes + size > this.maxBatchBytes)) yield flush();
      parts.push(json);
      bytes += size;
    }
    if (parts.length > 0) yield flush();
  }

  /** POSTs one batch, retrying network errors, 429 and 5xx; never other 4xx. */
  private async send(batch: { body: string; count: number }, headers: Record<string, string>): Promise<EventResult[]> {
    for (let attempt = 0; ; attempt += 1) {
      let failure: AttemptFailure;
      let retryAfterMs: number | undefined;
      try {
        const response = await this.fetch(this.url, {
          method: 'POST',
          headers,
          body: batch.body,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        if (response.ok) return await this.resultsOf(response, batch.count);
        const text = await response.text().catch(() => '');
        const body = jsonOf(text);
        // Every event rejected: a result per event like any batch's, not a failure of the call.
        if (
          response.status === 400 &&
          body?.code === 'events_rejected' &&
          Array.isArray(body.results) &&
          body.results.length === batch.count
        ) {
          return body.results as EventResult[];
        }
        const retryable = response.status === 429 || response.status >= 500;
        const message = typeof body?.error === 'string' ? body.error : text.slice(0, 200) || response.statusText;
        failure = new AttemptFailure(`Hookline answered ${response.status}: ${message}`, response.status, retryable);
        retryAfterMs = parseRetryAfterMs(response.headers.get('retry-after'), Date.now());
      } catch (error) {
        if (error instanceof AttemptFailure) throw error;
        failure = new AttemptFailure(`could not reach Hookline: ${(error as Error).message}`, undefined, true, {
          cause: error,
        });
      }
      if (!failure.retryable || attempt >= this.maxRetries) throw failure;
      await sleep(
        producerRetryDelayMs(attempt + 1, {
          baseMs: this.retryBaseMs,
          maxMs: this.retryMaxMs,
          retryAfterMs,
          random: Math.random,
        }),
      );
    }
  }

  private async resultsOf(response: Response, count: number): Promise<EventResult[]> {
    const body = (await response.json()) as { results?: unknown };
    if (!Array.isArray(body.results) || body.results.length !== count) {
      throw new AttemptFailure(
        `Hookline answered ${response.status} without a result for each of the ${count} events`,
        response.status,
        false,
      );
    }
    return body.results as EventResult[];
  }
}

/** The JSON object of an answer's body, or undefined when it is not one. */
function jsonOf(text: string): { error?: unknown; code?: unknown; results?: unknown } | undefined {
  try {
    const parsed = JSON.parse(text) as unknown;
    return typeof parsed === 'object' && parsed !== null ? parsed : undefined;
  } catch {
    return undefined;
  }
}
