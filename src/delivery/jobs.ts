import { createHash, hash } from 'node:crypto';
import { z } from 'zod';
import { bodyBytesEstimate, chunksOf, COMMAND_BYTES_MAX } from '../lib/chunks.js';
import { DELIVERY_STATUSES, deliverySchema } from '../domain/delivery.js';

/**
 * The job catalogue: every BullMQ job Hookline runs, its payload schema and its options.
 * Processors parse their payload on entry.
 */
export const JOBS = {
  /** One delivery of one event to one webhook; retried by the processor's own decisions. */
  deliver: {
    name: 'deliver',
    schema: deliverySchema,
  },
  /**
   * First attempts of up to BATCH_MAX deliveries of one ingest batch in one queue partition: one job
   * fetched and completed for many deliveries. What does not succeed leaves as a `deliver` job.
   */
  deliverBatch: {
    name: 'deliver-batch',
    schema: z.object({ deliveries: z.array(deliverySchema).min(1) }),
  },
  /** Replays every dead letter of one webhook, reporting progress through a task. */
  replayDeadLetters: {
    name: 'replay-dead-letters',
    schema: z.object({ taskId: z.string(), vendorId: z.string(), webhookId: z.string() }),
  },
  /**
   * A replay of the events a webhook's log holds in a time range (see src/tasks/range-replay.ts); its task's
   * state hash keeps its place, so a run that starts again goes on from there.
   */
  replayRange: {
    name: 'replay-range',
    schema: z.object({
      taskId: z.string(),
      vendorId: z.string(),
      webhookId: z.string(),
      sinceMs: z.number(),
      untilMs: z.number(),
      statuses: z.array(z.enum(DELIVERY_STATUSES)).optional(),
      eventTypes: z.array(z.string()).optional(),
      ratePerSecond: z.number().optional(),
    }),
  },
  /** An erasure (see src/tasks/erasure.ts): one event's data, or a vendor's; run as a task. */
  erase: {
    name: 'erase',
    schema: z.object({
      taskId: z.string(),
      kind: z.enum(['event', 'vendor']),
      id: z.string(),
      /** The API key id of the operator who asked (logged with the erasure). */
      requestedBy: z.string(),
    }),
  },
  /** The retention pass: trims every webhook's event log and records to its retention (a repeating job). */
  retention: {
    name: 'retention',
    schema: z.object({}),
  },
  /**
   * One operational webhook (`webhook.disabled`, `webhook.recovered`) to the operator's receiver,
   * with its exact body, so every retry sends the same bytes under the same `webhook-id`.
   */
  operationalWebhook: {
    name: 'operational-webhook',
    schema: z.object({
      id: z.string(),
      type: z.enum(['webhook.disabled', 'webhook.recovered']),
      webhookId: z.string(),
      vendorId: z.string(),
      body: z.string(),
    }),
  },
} as const satisfies Record<string, { name: string; schema: z.ZodType }>;

/** Deliveries per batch job at most: bounds a job's size and the work a crash makes a worker redo. */
export const BATCH_MAX = 100;

/**
 * Bytes of bodies per batch job at most (each body counted with BATCH_DELIVERY_OVERHEAD_BYTES for its
 * other fields and JSON escaping): a batch's data travels as one string, kept under
 * COMMAND_BYTES_MAX (see src/lib/chunks.ts).
 */
export const BATCH_BYTES_MAX = COMMAND_BYTES_MAX;
const BATCH_DELIVERY_OVERHEAD_BYTES = 400;

/** Splits a partition's deliveries into batches of at most BATCH_MAX deliveries and BATCH_BYTES_MAX bytes, in order. */
export function batchesOf<T extends { body: string }>(deliveries: readonly T[]): T[][] {
  return chunksOf(
    deliveries,
    (delivery) => bodyBytesEstimate(delivery.body) + BATCH_DELIVERY_OVERHEAD_BYTES,
    BATCH_BYTES_MAX,
    BATCH_MAX,
  );
}

/** The job id of a batch: derived from its deliveries, so re-enqueueing the same batch adds nothing. */
export function batchIdOf(deliveryIds: readonly string[]): string {
  return `b-${idsDigest(deliveryIds)}`;
}

/**
 * The job id of a park (deferred first attempts held as one delayed batch job): derived from the
 * job that parked them and its deliveries, so that job's re-run parks them under the same id, and a
 * park that parks all of its deliveries again gets a new one.
 */
export function parkIdOf(parkedBy: string, deliveryIds: readonly string[]): string {
  return `p-${idsDigest([parkedBy, ...deliveryIds])}`;
}

function idsDigest(ids: readonly string[]): string {
  const hash = createHash('sha256');
  for (const id of ids) hash.update(id).update('\n');
  return hash.digest('hex').slice(0, 32);
}
export type ReplayDeadLettersJob = z.infer<typeof JOBS.replayDeadLetters.schema>;
export type ReplayRangeJob = z.infer<typeof JOBS.replayRange.schema>;
export type EraseJob = z.infer<typeof JOBS.erase.schema>;
export type OperationalWebhookJob = z.infer<typeof JOBS.operationalWebhook.schema>;

/** The queue partition of a webhook: a stable hash, so one webhook's deliveries stay in one queue. */
export function partitionOf(webhookId: string, partitions: number): number {
  if (partitions <= 1) return 0;
  return hash('sha1', webhookId, 'buffer').readUInt32BE(0) % partitions;
}
