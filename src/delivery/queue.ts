import { Job, Queue, type JobsOptions } from 'bullmq';
import type { LineEntry, RedisFifoLines } from '../store/fifo-lines.js';
import { orderingBucketOfBody } from '../domain/ordering-key.js';
import type { RedisKeys } from '../store/keys.js';
import type { Redis } from '../store/redis.js';
import type { DeliveryEnqueuer, DeliveryRequest } from '../ingest/ingest.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { DeferredRef } from './endpoints/wakeups.js';
import { appendBatch, streamCounts } from './first-attempts.js';
import {
  batchesOf,
  batchIdOf,
  JOBS,
  partitionOf,
  type OperationalWebhookJob,
  type ReplayDeadLettersJob,
  type EraseJob,
} from './jobs.js';

/**
 * Batch jobs: parks (deferred first attempts behind one endpoint, delayed until it can take them)
 * and, from before first attempts moved to the streams (see first-attempts.ts), ingest's batches.
 */
export const BATCH_QUEUE_NAME = 'deliveries';
/** Every delivery that runs on its own: retries, deferrals, replays and test events. */
export const SINGLE_QUEUE_NAME = 'retries';
export const CONTROL_QUEUE_NAME = 'control';
/** Operational webhooks to the operator's receiver; beside the control queue, under its hash tag. */
export const OPERATIONAL_QUEUE_NAME = 'operational';
/**
 * The retention pass and erasures: apart from the control queue, so replays (a paced range replay
 * may run for hours) never hold them back.
 */
export const MAINTENANCE_QUEUE_NAME = 'maintenance';
/** Spare attempts for unexpected processor errors (a Redis blip while recording), beyond the schedule. */
const SPARE_ATTEMPTS = 10;
/** Failed jobs are kept for a look at most this long (less when the retention is shorter: delivery jobs hold bodies). */
const FAILED_JOB_RETENTION_S = 7 * 24 * 3_600;
/** BullMQ's event stream per queue, trimmed to about this many entries (nothing in Hookline reads it). */
const EVENTS_MAX_LEN = 1_000;

export interface DeliveryQueueOptions {
  connection: Redis;
  keys: RedisKeys;
  partitions: number;
  retryScheduleMs: readonly number[];
  /** The lines of FIFO webhooks: their deliveries go there instead of the queues. */
  lines: Pick<RedisFifoLines, 'append' | 'orderingOf'>;
  nowMs: () => number;
  /** HOOKLINE_RETENTION (ms): failed jobs, which hold bodies, are kept no longer. */
  retentionMs?: number;
  /** Queue errors (connection trouble); BullMQ would print them to the console otherwise. */
  onError?: (error: Error) => void;
}

/** The two delivery queues of one partition; they share its hash tag (one Redis Cluster slot). */
export interface DeliveryPartition {
  batches: Queue;
  singles: Queue;
}

/** A delivery to run on its own, after `delayMs`. */
export interface SingleDelivery {
  job: DeliverJob;
  delayMs: number;
}

/**
 * The delivery queues: `partitions` pairs of BullMQ queues, each pair under its own hash tag, so on
 * Redis Cluster they spread over shards. A webhook's deliveries always go to the same partition.
 */
export class DeliveryQueues implements DeliveryEnqueuer {
  readonly partitions: DeliveryPartition[];
  readonly control: Queue;
  readonly maintenance: Queue;
  readonly operational: Queue;
  readonly retryScheduleMs: readonly number[];

  /** How long a failed job is kept (s): a week, or the retention when that is shorter. */
  private readonly failedJobRetentionS: number;

  constructor(private readonly options: DeliveryQueueOptions) {
    this.retryScheduleMs = options.retryScheduleMs;
    this.failedJobRetentionS = Math.min(FAILED_JOB_RETENTION_S, Math.ceil((options.retentionMs ?? Infinity) / 1_000));
    const queue = (name: string, prefix: string) =>
      new Queue(name, { connection: options.connection, prefix, streams: { events: { maxLen: EVENTS_MAX_LEN } } });
    this.partitions = Array.from({ length: options.partitions }, (_, n) => ({
      batches: queue(BATCH_QUEUE_NAME, options.keys.deliveryQueuePrefix(n)),
      singles: queue(SINGLE_QUEUE_NAME, options.keys.deliveryQueuePrefix(n)),
    }));
    this.control = queue(CONTROL_QUEUE_NAME, options.keys.controlQueuePrefix);
    this.operational = queue(OPERATIONAL_QUEUE_NAME, options.keys.controlQueuePrefix);
    this.maintenance = queue(MAINTENANCE_QUEUE_NAME, options.keys.controlQueuePrefix);
    const onError = options.onError ?? (() => undefined);
    for (const q of this.allQueues()) q.on('error', onError);
  }

  /** Job options of a delivery: our processor decides retries; BullMQ only carries them out. */
  private jobOptions(jobId: string, delayMs: number): JobsOptions {
    return {
      jobId,
      attempts: this.options.retryScheduleMs.length + SPARE_ATTEMPTS,
      backoff: { type: 'hookline' },
      delay: delayMs,
      removeOnComplete: true,
      removeOnFail: { age: this.failedJobRetentionS },
    };
  }

  /**
   * Ingest's deliveries: grouped by partition into batches (see batchesOf), each appended to its
   * partition's first-attempt stream on its own (a delayed batch job when the schedule's first
   * attempt waits), so no write to Redis carries more than one; those of FIFO webhooks are appended
   * to their lines instead (the webhook's own, or the bucket ingest found for their ordering key), in
   * the order given (the accept order): one script per partition for all of them.
   */
  async enqueue(requests: readonly DeliveryRequest[], options: { bodiesLogged?: boolean } = {}): Promise<void> {
    // A schedule whose first attempt waits (HOOKLINE_RETRY_SCHEDULE not starting at 0s) needs a
    // delayed job; a stream entry is read at once.
    const firstDelayMs = this.options.retryScheduleMs[0] ?? 0;
    const deliveries = requests.map(({ fifo: _fifo, orderingBucket: _bucket, ...r }) => r);
    const lined: LineEntry[] = deliveries.flatMap((job, i) => {
      const { fifo, orderingBucket } = requests[i]!;
      return fifo === true ? [{ job, bucket: orderingBucket }] : [];
    });
    const unordered = deliveries.filter((_, i) => requests[i]!.fifo !== true);
    await Promise.all([
      lined.length === 0 ? undefined : this.options.lines.append(lined, this.options.nowMs()),
      ...[...this.byPartition(unordered, (d) => d)].flatMap(([n, list]) =>
        batchesOf(list).map((batch) =>
          firstDelayMs === 0
            ? appendBatch(
                this.options.connection,
                this.options.keys.firstAttempts.streamOf(n),
                batch,
                options.bodiesLogged === true,
              )
            : this.partitions[n]!.batches.addBulk([
                {
                  name: JOBS.deliverBatch.name,
                  data: { deliveries: batch },
                  opts: this.jobOptions(batchIdOf(batch.map((d) => d.deliveryId)), firstDelayMs),
                },
              ]),
        ),
      ),
    ]);
  }

  /**
   * Adds deliveries that run on their own (replays and test events carry fresh delivery ids). A
   * replay to a FIFO webhook joins the end of its line (by its body's key value when the webhook
   * has an ordering key now); a test event does not wait in it.
   */
  async add(jobs: readonly DeliverJob[]): Promise<void> {
    const delayMs = this.options.retryScheduleMs[0] ?? 0;
    const replays = jobs.filter((job) => job.replayOf !== undefined);
    const orderings = await this.options.lines.orderingOf(replays.map((job) => job.webhookId));
    const lined = replays.flatMap((job, i): LineEntry[] => {
      const ordering = orderings[i];
      if (ordering === undefined) return [];
      const { orderingKey } = ordering;
      return [{ job, bucket: orderingKey === undefined ? undefined : orderingBucketOfBody(job.body, orderingKey) }];
    });
    if (lined.length > 0) await this.options.lines.append(lined, this.options.nowMs());
    const linedJobs = new Set(lined.map((entry) => entry.job));
    await this.addSingles(jobs.filter((job) => !linedJobs.has(job)).map((job) => ({ job, delayMs })));
  }

  /**
   * Adds single deliveries, each after its own delay. The job id is the delivery id, so adding one
   * that is already queued (a batch re-run after a crash) adds nothing.
   */
  async addSingles(singles: readonly SingleDelivery[]): Promise<void> {
    if (singles.length === 0) return;
    await Promise.all(
      [...this.byPartition(singles, (s) => s.job)].map(([n, list]) =>
        this.partitions[n]!.singles.addBulk(
          list.map(({ job, delayMs }) => ({
            name: JOBS.deliver.name,
            data: job,
            opts: this.jobOptions(job.deliveryId, Math.max(0, Math.round(delayMs))),
          })),
        ),
      ),
    );
  }

  /**
   * Moves delayed jobs (single deliveries, parked batches) to the front of their queue, to run now;
   * one that is no longer delayed (it ran meanwhile, or was never added) is left as it is. One round
   * trip per job.
   */
  async promote(refs: readonly Pick<DeferredRef, 'webhookId' | 'jobId' | 'parked'>[]): Promise<void> {
    await Promise.all(
      [...this.byPartition(refs, (r) => r)].flatMap(([n, list]) =>
        // A job handle by id alone: promote() needs only the queue and the id, not the job's data.
        list.map((ref) =>
          new Job(
            ref.parked ? this.partitions[n]!.batches : this.partitions[n]!.singles,
            JOBS.deliver.name,
            {},
            {},
            ref.jobId,
          )
            .promote()
            .catch(() => undefined),
        ),
      ),
    );
  }

  /**
   * Parks deferred first attempts as delayed batch jobs, each holding deliveries of one partition:
   * one job (and one promotion) for many deliveries waiting on one endpoint, instead of one each.
   * Adding a park whose id exists already adds nothing.
   */
  async park(parks: readonly { jobId: string; deliveries: DeliverJob[]; delayMs: number }[]): Promise<void> {
    await Promise.all(
      parks.map(({ jobId, deliveries, delayMs }) =>
        this.partitions[partitionOf(deliveries[0]!.webhookId, this.partitions.length)]!.batches.addBulk([
          {
            name: JOBS.deliverBatch.name,
            data: { deliveries },
            opts: this.jobOptions(jobId, Math.max(0, Math.round(delayMs))),
          },
        ]),
      ),
    );
  }

  async addReplayAll(job: ReplayDeadLettersJob): Promise<void> {
    await this.control.add(JOBS.replayDeadLetters.name, job, this.taskJobOptions(job.taskId));
  }

  /** Options of a job that runs a task (a bulk replay, a range replay, an erasure): its id is the task's. */
  private taskJobOptions(taskId: string): JobsOptions {
    return {
      jobId: taskId,
      attempts: 5,
      backoff: { type: 'exponential', delay: 1_000 },
      removeOnComplete: true,
      removeOnFail: { age: this.failedJobRetentionS },
    };
  }

  /** Queues an erasure's run (its task was created already). */
  async addErase(job: EraseJob): Promise<void> {
    await this.maintenance.add(JOBS.erase.name, job, this.taskJobOptions(job.taskId));
  }

  /** Makes sure the retention pass runs every `everyMs` on some worker (one schedule for all of them). */
  async scheduleRetention(everyMs: number): Promise<void> {
    await this.maintenance.upsertJobScheduler(
      JOBS.retention.name,
      { every: everyMs },
      { name: JOBS.retention.name, data: {}, opts: { removeOnComplete: true, removeOnFail: 100 } },
    );
  }

  /** Queues an operational webhook; retried on the delivery schedule by its processor's own decisions. */
  async addOperationalWebhook(job: OperationalWebhookJob): Promise<void> {
    await this.operational.add(
      JOBS.operationalWebhook.name,
      job,
      this.jobOptions(job.id, this.options.retryScheduleMs[0] ?? 0),
    );
  }

  /**
   * Jobs by state over all partitions (waiting, delayed, active, …); a batch counts once, and a
   * first-attempt stream's batches count as waiting (not yet read) or active (read, not finished).
   */
  async counts(): Promise<Record<string, number>> {
    const queues = this.partitions.flatMap((p) => [p.batches, p.singles]);
    const all: Record<string, number>[] = await Promise.all([
      ...queues.map((q) => q.getJobCounts('waiting', 'delayed', 'active', 'prioritized', 'waiting-children', 'failed')),
      ...this.partitions.map((_, n) =>
        streamCounts(this.options.connection, this.options.keys.firstAttempts.streamOf(n)),
      ),
    ]);
    const total: Record<string, number> = {};
    for (const counts of all) for (const [state, n] of Object.entries(counts)) total[state] = (total[state] ?? 0) + n;
    return total;
  }

  async close(): Promise<void> {
    await Promise.all(this.allQueues().map((q) => q.close()));
  }

  private allQueues(): Queue[] {
    return [
      ...this.partitions.flatMap((p) => [p.batches, p.singles]),
      this.control,
      this.operational,
      this.maintenance,
    ];
  }

  private byPartition<T>(items: readonly T[], jobOf: (item: T) => { webhookId: string }): Map<number, T[]> {
    const groups = new Map<number, T[]>();
    for (const item of items) {
      const n = partitionOf(jobOf(item).webhookId, this.partitions.length);
      const list = groups.get(n);
      if (list) list.push(item);
      else groups.set(n, [item]);
    }
    return groups;
  }
}
