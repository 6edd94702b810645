import { hash, randomBytes } from 'node:crypto';
import type { DeliverJob } from './delivery.js';

/**
 * A W3C Trace Context (https://www.w3.org/TR/trace-context/): the trace an event belongs to and the
 * span that handed it on. What travels with a delivery is its `traceparent` text (55 characters),
 * so the queues, the first-attempt streams and FIFO lines carry it as one more JSON string.
 */
export interface TraceContext {
  /** 32 lower-case hex digits, not all zero. */
  traceId: string;
  /** 16 lower-case hex digits, not all zero. */
  spanId: string;
  /** The caller recorded this trace: spans under it are sampled too (with the default parent-based sampler). */
  sampled: boolean;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^]*)?$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/**
 * The context of a `traceparent` header or field, or undefined when it is absent or not valid (the
 * specification's rule: an invalid header is ignored, and a new trace starts). Version 00 is exactly
 * 55 characters; a later version may add fields after the fourth, which are ignored; ff is invalid.
 */
export function parseTraceparent(value: unknown): TraceContext | undefined {
  if (typeof value !== 'string' || value.length < 55 || value.length > 256) return undefined;
  const text = value.trim();
  const match = TRACEPARENT.exec(text);
  if (match === null) return undefined;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, sampled: (parseInt(flags, 16) & 1) === 1 };
}

/** The `traceparent` text of a context (version 00). */
export function traceparentOf(context: TraceContext): string {
  return `00-${context.traceId}-${context.spanId}-${context.sampled ? '01' : '00'}`;
}

/**
 * A context for a delivery that came without a trace, sent to a receiver that asked for one
 * (`propagate_trace`) while tracing is off: its trace id is derived from the delivery id, so every
 * attempt of the delivery names the same trace (and the delivery log shows it), and a random span id
 * per attempt. Not sampled: no span of it is recorded here.
 */
export function deliveryTraceContext(deliveryId: string): TraceContext {
  return {
    traceId: hash('sha256', deliveryId, 'hex').slice(0, 32),
    spanId: randomBytes(8).toString('hex'),
    sampled: false,
  };
}

/**
 * The engine's spans (docs/operations.md#traces). Everything that makes a span calls these through
 * an optional `tracing` dependency: with trace export off there is no Tracing at all, no span object
 * is made and the OpenTelemetry SDK is never loaded.
 */
export interface Tracing {
  /**
   * A span around one ingest call: a SERVER span `POST /internal/v1/events` under the producer's
   * `traceparent` header, or a CONSUMER span `process <stream>` for a stream batch, linked to each
   * entry's `traceparent`. Its context is what the batch's deliveries carry when their event came
   * without a trace of its own.
   */
  startIngest(start: IngestStart): IngestSpan;
  /** The CLIENT span of one delivery attempt, under the delivery's carried context (a root span when it has none). */
  startAttempt(start: AttemptStart): AttemptSpan;
  /**
   * A zero-length span for a step of a delivery that sent nothing (a deferral, an attempt not sent
   * because the circuit is open, a dead letter of a disabled or long-paused webhook, a drop).
   */
  note(job: DeliverJob, name: string, atMs: number, attributes: Readonly<Record<string, string | number>>): void;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

export interface IngestStart {
  source: 'http' | 'stream';
  /** The stream's key, for a stream batch. */
  stream?: string;
  /** The request's `traceparent` (and `tracestate`, passed on as given). */
  parent?: TraceContext;
  traceState?: string;
  /** A stream batch's entries' contexts. */
  links?: readonly TraceContext[];
  events: number;
  startMs: number;
}

export interface IngestSpan {
  /** The span's own context (valid also when not sampled). */
  readonly context: TraceContext;
  end(summary: { accepted: number; duplicates: number; rejected: number; deliveries: number }, endMs: number): void;
  /** Ends the span as failed (ingest threw: nothing was acknowledged). */
  fail(error: Error, endMs: number): void;
}

export interface AttemptStart {
  job: DeliverJob;
  attempt: number;
  /** The callback URL (its query, fragment and credentials are left out of the span). */
  url: string;
  startMs: number;
}

export interface AttemptSpan {
  readonly context: TraceContext;
  end(result: AttemptEnd): void;
}

export interface AttemptEnd {
  /** `delivered`, `http_5xx`, `timeout`, … */
  outcome: string;
  /** `delivered`, `retry`, `dead`, `disable`. */
  decision: string;
  statusCode?: number;
  retryInMs?: number;
  error?: string;
  endMs: number;
}
