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
});

export type DeliverJob = z.infer<typeof deliverySchema>;

export const DELIVERY_STATUSES = ['pending', 'retrying', 'delivered', 'dead', 'dropped', 'replayed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/**
 * Why an attempt got no HTTP response. `circuit_open` is never the sender's: the processor records
 * it for an attempt that came due while the endpoint's circuit was open, and was not sent.
 */
export type AttemptErrorClass = 'timeout' | 'dns' | 'connect' | 'tls' | 'ssrf_blocked' | 'network' | 'circuit_open';

/** What one attempt amounted to: the label of the attempt log and the outcome metrics. */
export type AttemptOutcome = 'delivered' | 'http_3xx' | 'http_4xx' | 'http_5xx' | AttemptErrorClass;

/** One attempt as recorded (and shown to vendors). */
export interface AttemptRecord {
  attempt: number;
  atMs: number;
  /** `delivered`, `http_4xx`, `timeout`, `ssrf_blocked`, … */
  outcome: string;
  statusCode?: number;
  durationMs: number;
  error?: string;
  responseSnippet?: string;
}
