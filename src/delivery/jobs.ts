import { createHash } from 'node:crypto';
import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES } from '../domain/events.js';

/**
 * The job catalogue: every BullMQ job Hookline runs, its payload schema and its options.
 * Processors parse their payload on entry.
 */
export const JOBS = {
  /** One delivery of one event to one webhook; retried by the processor's own decisions. */
  deliver: {
    name: 'deliver',
    schema: z.object({
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
    }),
  },
  /** Replays every dead letter of one webhook, reporting progress through a task. */
  replayDeadLetters: {
    name: 'replay-dead-letters',
    schema: z.object({ taskId: z.string(), vendorId: z.string(), webhookId: z.string() }),
  },
} as const satisfies Record<string, { name: string; schema: z.ZodType }>;

export type DeliverJob = z.infer<typeof JOBS.deliver.schema>;
export type ReplayDeadLettersJob = z.infer<typeof JOBS.replayDeadLetters.schema>;

/**
 * The delivery id of (event, webhook): a UUID derived from both, so enqueueing the same pair again
 * (an ingest retried after a crash) finds the same job instead of adding a second delivery.
 */
export function deliveryIdFor(eventId: string, webhookId: string): string {
  const hex = createHash('sha256').update(`${eventId}\n${webhookId}`).digest('hex');
  // Shaped as a version-8 (custom) UUID.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16] ?? '0', 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** The queue partition of a webhook: a stable hash, so one webhook's deliveries stay in one queue. */
export function partitionOf(webhookId: string, partitions: number): number {
  if (partitions <= 1) return 0;
  return createHash('sha1').update(webhookId).digest().readUInt32BE(0) % partitions;
}
