import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES } from './events.js';

/**
 * A delivery: one event to one webhook, as the queues carry it and the delivery log records it.
 * What the stores, the delivery stage and the admin API share about deliveries lives here, so none
 * of them needs another's module for it.
 */
export const deliverySchema = z.object({
  deliveryId: z.string(),
  eventId: z.string(),
  eventType: z.enum(WEBHOOK_EVENT_TYPES),
  vendorId: z.string(),
  webhookId: z.string(),
  /** The exact JSON body the receiver gets. */
  body: z.string(),
  acceptedAtMs: z.number(),
  /** Set on a replay: the dead-lettered delivery it replays. */
  replayOf: z.string().optional(),
  /**
   * Set on deliveries a vendor asked for (a replay or a test event): an open circuit is probed with
   * it at once instead of at the end of its open period.
   */
  manual: z.literal(true).optional(),
  /**
   * The W3C `traceparent` of the event's trace (the ingest span's, or the producer's when trace
   * export is off): attempts are spans under it, and it is what `propagate_trace` sends on.
   */
  traceparent: z.string().max(256).optional(),
  /** The producer's W3C `tracestate` beside its traceparent, passed on as given with `propagate_trace`. */
  tracestate: z.string().max(512).optional(),
});

export type DeliverJob = z.infer<typeof deliverySchema>;

export const DELIVERY_STATUSES = ['pending', 'retrying', 'delivered', 'dead', 'dropped', 'replayed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/**
 * Why an attempt got no HTTP response. `circuit_open` is never the sender's: the processor records
 * it for an attempt that came due while the endpoint's circuit was open, and was not sent. `auth`:
 * the webhook's OAuth2 token endpoint gave no token, so the delivery was not sent.
 */
export type AttemptErrorClass =
  'timeout' | 'dns' | 'connect' | 'tls' | 'ssrf_blocked' | 'network' | 'auth' | 'circuit_open';

/** What one attempt amounted to: the label of the attempt log and the outcome metrics. */
export type AttemptOutcome = 'delivered' | 'http_3xx' | 'http_4xx' | 'http_5xx' | AttemptErrorClass;

/**
 * Outcomes of attempts recorded without a request: due while the endpoint's circuit was open, or
 * dead-lettered unsent (the webhook disabled by the engine, paused past the delivery's retry
 * window, or the delivery past the webhook's max_age). They say nothing about the receiver: no
 * duration, no endpoint stats, a zero-length span.
 */
export const UNSENT_OUTCOMES: ReadonlySet<string> = new Set([
  'circuit_open',
  'webhook_disabled',
  'paused_expired',
  'max_age_expired',
]);

/**
 * What an attempt's request headers depend on beyond the delivery record (event id and type) and the
 * attempt (its number, and `atMs`, whose whole seconds are the signed `webhook-timestamp`): recorded
 * with each attempt that made a request, so the delivery log can show its headers exactly.
 */
export interface SentRequest {
  /** The Host header: the callback URL's host, with the port unless it is the scheme's default. */
  host: string;
  /** Content-Length: the body's UTF-8 bytes. */
  bodyBytes: number;
  /** The `v1,` entries of webhook-signature: 0 without a secret, 2 during a rotation. */
  signatures: number;
  /** The `v1a,` entries (Ed25519): absent or 0 unless the webhook signs with keys, 2 during a key rotation. */
  keySignatures?: number;
  userAgent: string;
  /** The webhook's custom header names, in the order sent (their values are never recorded). */
  headerNames?: string[];
  /** The Authorization scheme `auth` sent (its credentials are never recorded). */
  authScheme?: 'Basic' | 'Bearer';
  /** The W3C traceparent sent (a webhook with `propagate_trace`). */
  traceparent?: string;
  /** The producer's tracestate sent beside it. */
  tracestate?: string;
}

/** One attempt as recorded (and shown to vendors). */
export interface AttemptRecord {
  attempt: number;
  /** When the attempt started; its whole seconds are the `webhook-timestamp` it was signed with. */
  atMs: number;
  /** `delivered`, `http_4xx`, `timeout`, `ssrf_blocked`, … */
  outcome: string;
  statusCode?: number;
  durationMs: number;
  error?: string;
  responseSnippet?: string;
  /** Absent when no request was made (`circuit_open`, `webhook_disabled`, `auth` without a token) and on attempts recorded before it was. */
  sent?: SentRequest;
  /** The trace the attempt belongs to (32 hex digits), when the delivery had one or the receiver was sent one. */
  traceId?: string;
}
