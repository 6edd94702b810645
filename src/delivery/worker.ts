import { Worker, type Job } from 'bullmq';
import type { Logger } from '../logger.js';
import type { RedisKeys } from '../store/keys.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import { FirstAttemptReader, type FirstAttemptBatch, type FirstAttemptReaderOptions } from './first-attempts.js';
import { BATCH_MAX, JOBS, type EraseJob, type ReplayRangeJob } from './jobs.js';
import { backoffFromError, RetryLaterError, StorageUnavailableError } from './signals.js';
import {
  BATCH_QUEUE_NAME,
  CONTROL_QUEUE_NAME,
  MAINTENANCE_QUEUE_NAME,
  OPERATIONAL_QUEUE_NAME,
  SINGLE_QUEUE_NAME,
} from './queue.js';
import { raceTimer } from '../lib/timer-race.js';

export interface DeliveryWorkerPoolOptions {
  /** A connection made for BullMQ (maxRetriesPerRequest null, no auto-pipelining). */
  connection: Redis;
  keys: RedisKeys;
  partitions: number;
  /** Deliveries in flight in this process, over all partitions (the send slots). */
  concurrency: number;
  /** Runs a batch job (a park, or ingest's first attempts when they wait). */
  batchProcessor: (job: Job, token?: string) => Promise<unknown>;
  /** Runs a batch of a first-attempt stream. */
  batchRunner: (batch: FirstAttemptBatch) => Promise<unknown>;
  /** The event log's bodies, for first-attempt entries that refer to it (see first-attempts.ts). */
  loggedBodies: FirstAttemptReaderOptions['loggedBodies'];
  /** Told about each first-attempt reader's connection (outages logged with the process's others). */
  watchConnection?: (connection: Redis) => void;
  /** Runs a single delivery job (retries, deferrals, replays, test events). */
  singleProcessor: (job: Job, token?: string) => Promise<unknown>;
  // The operator tasks (src/tasks/) the control and maintenance queues run, as the calls the pool
  // makes: the composition root passes them in, so delivery never imports tasks (tasks import delivery).
  /** Replays a webhook's dead letters (src/tasks/replay.ts). */
  replayer: { runReplayAll(taskId: string, webhookId: string): Promise<unknown> };
  /** Runs a range replay queued on the control queue (src/tasks/range-replay.ts). */
  rangeReplayer: { run(job: ReplayRangeJob): Promise<unknown> };
  /** The retention pass (a repeating control job). */
  retention: { run(): Promise<unknown> };
  /** Runs erasure tasks. */
  eraser: { run(job: EraseJob): Promise<unknown> };
  /** Sends operational webhooks; absent (none configured): this process leaves their queue alone. */
  operationalProcessor?: (job: Job) => Promise<unknown>;
  logger: Logger;
  /** How long a job's lock lasts without renewal; a killed worker's jobs return after this. */
  lockDurationMs: number;
}

/** How long a forced close (past the grace period) may take before the pool gives up on it. */
const FORCED_CLOSE_MS = 1_000;

/**
 * The BullMQ workers of one process: per delivery partition one for batches and one for single
 * deliveries, plus the control queue. Batches are fetched a few at a time (enough to keep the send
 * slots busy); single jobs may each wait on a slow endpoint, so they get as many as there are slots,
 * and they never stand in the way of the batches.
 */
export class DeliveryWorkerPool {
  private readonly workers: Worker[];
  /** One per partition; started by the engine once Redis answers (each creates its group first). */
  readonly readers: FirstAttemptReader[];

  constructor(options: DeliveryWorkerPoolOptions) {
    const singlesPerPartition = Math.max(1, Math.ceil(options.concurrency / options.partitions));
    const batchesPerPartition = Math.max(2, Math.ceil((2 * options.concurrency) / (BATCH_MAX * options.partitions)));
    const common = {
      connection: options.connection,
      lockDuration: options.lockDurationMs,
      // A killed worker's jobs are re-run, never failed for having stalled.
      maxStalledCount: 1_000,
      stalledInterval: Math.max(1_000, Math.floor(options.lockDurationMs / 2)),
      settings: { backoffStrategy: backoffFromError },
      autorun: false,
    };
    this.workers = [];
    this.readers = [];
    for (let n = 0; n < options.partitions; n++) {
      this.readers.push(
        new FirstAttemptReader({
          redis: options.connection,
          partition: n,
          stream: options.keys.firstAttempts.streamOf(n),
          failedStream: options.keys.firstAttempts.failedOf(n),
          run: options.batchRunner,
          loggedBodies: options.loggedBodies,
          inFlightMax: batchesPerPartition,
          claimMinIdleMs: options.lockDurationMs,
          logger: options.logger,
          ...(options.watchConnection ? { watchConnection: options.watchConnection } : {}),
        }),
      );
      const prefix = options.keys.deliveryQueuePrefix(n);
      this.workers.push(
        new Worker(BATCH_QUEUE_NAME, options.batchProcessor, { ...common, prefix, concurrency: batchesPerPartition }),
        new Worker(SINGLE_QUEUE_NAME, withoutReturnValue(options.singleProcessor), {
          ...common,
          prefix,
          concurrency: singlesPerPartition,
        }),
      );
    }
    this.workers.push(
      new Worker(
        CONTROL_QUEUE_NAME,
        async (job) => {
          // Range replays wait in the replays' queue now (see src/tasks/replay-runner.ts); one queued here
          // before that still runs here, once.
          if (job.name === JOBS.replayRange.name)
            return options.rangeReplayer.run(JOBS.replayRange.schema.parse(job.data));
          const data = JOBS.replayDeadLetters.schema.parse(job.data);
          return options.replayer.runReplayAll(data.taskId, data.webhookId);
        },
        // A few at once: one webhook's long replay must not hold back the others.
        { ...common, prefix: options.keys.controlQueuePrefix, concurrency: 4 },
      ),
      new Worker(
        MAINTENANCE_QUEUE_NAME,
        async (job) =>
          job.name === JOBS.retention.name
            ? options.retention.run()
            : options.eraser.run(JOBS.erase.schema.parse(job.data)),
        { ...common, prefix: options.keys.controlQueuePrefix, concurrency: 2 },
      ),
    );
    // A few at once: one operator receiver that hangs must not hold back every other message.
    if (options.operationalProcessor) {
      this.workers.push(
        new Worker(OPERATIONAL_QUEUE_NAME, options.operationalProcessor, {
          ...common,
          prefix: options.keys.controlQueuePrefix,
          concurrency: 4,
        }),
      );
    }
    // Other errors may repeat on every job fetch: log at most one every 10 s.
    let lastErrorLogMs = 0;
    for (const worker of this.workers) {
      worker.on('error', (error) => {
        // A connection error repeats on every reconnect attempt of every worker; the process's
        // connection watcher logs the outage once.
        if (isRedisUnavailable(error)) return;
        const now = Date.now();
        if (now - lastErrorLogMs < 10_000) return;
        lastErrorLogMs = now;
        options.logger.warn({ err: error.message }, 'queue worker error (repeats within 10 s are not logged)');
      });
      worker.on('failed', (job, error) => {
        // A retry the processor chose, or a job that stopped for a storage outage (a batch's, or one
        // whose Redis connection dropped under it: the outage is logged once, and the job runs again).
        if (error instanceof RetryLaterError || error instanceof StorageUnavailableError || isRedisUnavailable(error))
          return;
        options.logger.warn({ jobId: job?.id, err: error.message }, 'job failed unexpectedly');
      });
    }
  }

  /** Starts fetching jobs (the readers start on their own). */
  start(): void {
    for (const worker of this.workers) void worker.run();
  }

  /**
   * Stops fetching and lets in-flight attempts finish for up to `graceMs`; past that, closes anyway
   * and the unfinished jobs return to the queue when their locks expire (nothing is lost).
   */
  async close(graceMs: number): Promise<'drained' | 'forced'> {
    const graceful = Promise.all([...this.workers.map((w) => w.close()), ...this.readers.map((r) => r.stop())]).then(
      () => 'drained' as const,
    );
    const result = await raceTimer(graceful, graceMs, 'forced' as const);
    if (result === 'forced') {
      // Closing needs Redis; during an outage it would wait for Redis to come back. Give it a moment only.
      await raceTimer(Promise.all(this.workers.map((w) => w.close(true))), FORCED_CLOSE_MS, undefined);
    }
    return result;
  }
}

/**
 * A processor whose result BullMQ never stores. BullMQ writes a job's return value into the job and
 * into the queue's events stream (`completed`, kept for the last EVENTS_MAX_LEN events even though
 * completed jobs are removed): a single delivery's outcome carries its job, body included, and that
 * copy of the payload would outlive the delivery log's retention and escape an erasure.
 */
function withoutReturnValue(
  processor: (job: Job, token?: string) => Promise<unknown>,
): (job: Job, token?: string) => Promise<void> {
  return async (job, token) => {
    await processor(job, token);
  };
}
