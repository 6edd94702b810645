import { Queue, type JobsOptions } from 'bullmq';
import type { RedisKeys } from '../store/keys.js';
import type { Redis } from '../store/redis.js';
import type { DeliveryEnqueuer, DeliveryRequest } from '../ingest/ingest.js';
import { deliveryIdFor, JOBS, partitionOf, type DeliverJob, type ReplayDeadLettersJob } from './jobs.js';

export const DELIVERY_QUEUE_NAME = 'deliveries';
export const CONTROL_QUEUE_NAME = 'control';
/** Spare attempts for unexpected processor errors (a Redis blip while recording), beyond the schedule. */
const SPARE_ATTEMPTS = 10;
const FAILED_JOB_RETENTION_S = 7 * 24 * 3_600;

export interface DeliveryQueueOptions {
  connection: Redis;
  keys: RedisKeys;
  partitions: number;
  retryScheduleMs: readonly number[];
  /** Queue errors (connection trouble); BullMQ would print them to the console otherwise. */
  onError?: (error: Error) => void;
}

/**
 * The delivery queues: `partitions` BullMQ queues, each under its own hash tag, so on Redis Cluster
 * they spread over shards. A webhook's deliveries always go to the same partition.
 */
export class DeliveryQueues implements DeliveryEnqueuer {
  readonly partitions: Queue[];
  readonly control: Queue;
  readonly retryScheduleMs: readonly number[];

  constructor(private readonly options: DeliveryQueueOptions) {
    this.retryScheduleMs = options.retryScheduleMs;
    this.partitions = Array.from(
      { length: options.partitions },
      (_, n) => new Queue(DELIVERY_QUEUE_NAME, { connection: options.connection, prefix: options.keys.deliveryQueuePrefix(n) }),
    );
    this.control = new Queue(CONTROL_QUEUE_NAME, { connection: options.connection, prefix: options.keys.controlQueuePrefix });
    const onError = options.onError ?? (() => undefined);
    for (const queue of [...this.partitions, this.control]) queue.on('error', onError);
  }

  /** Job options of a delivery: our processor decides retries; BullMQ only carries them out. */
  private jobOptions(deliveryId: string): JobsOptions {
    return {
      jobId: deliveryId,
      attempts: this.options.retryScheduleMs.length + SPARE_ATTEMPTS,
      backoff: { type: 'hookline' },
      delay: this.options.retryScheduleMs[0] ?? 0,
      removeOnComplete: true,
      removeOnFail: { age: FAILED_JOB_RETENTION_S },
    };
  }

  async enqueue(requests: readonly DeliveryRequest[]): Promise<void> {
    await this.add(requests.map((r) => ({ ...r, deliveryId: deliveryIdFor(r.eventId, r.webhookId) })));
  }

  /** Adds delivery jobs as they are (replays and test events carry fresh delivery ids). */
  async add(jobs: readonly DeliverJob[]): Promise<void> {
    const byPartition = new Map<number, DeliverJob[]>();
    for (const job of jobs) {
      const n = partitionOf(job.webhookId, this.partitions.length);
      const list = byPartition.get(n) ?? [];
      list.push(job);
      byPartition.set(n, list);
    }
    await Promise.all(
      [...byPartition].map(([n, list]) =>
        this.partitions[n]!.addBulk(list.map((data) => ({ name: JOBS.deliver.name, data, opts: this.jobOptions(data.deliveryId) }))),
      ),
    );
  }

  async addReplayAll(job: ReplayDeadLettersJob): Promise<void> {
    await this.control.add(JOBS.replayDeadLetters.name, job, { jobId: job.taskId, attempts: 5, backoff: { type: 'exponential', delay: 1_000 }, removeOnComplete: true, removeOnFail: { age: FAILED_JOB_RETENTION_S } });
  }

  /** Jobs by state over all partitions (waiting, delayed, active, …). */
  async counts(): Promise<Record<string, number>> {
    const all = await Promise.all(this.partitions.map((q) => q.getJobCounts('waiting', 'delayed', 'active', 'prioritized', 'waiting-children', 'failed')));
    const total: Record<string, number> = {};
    for (const counts of all) for (const [state, n] of Object.entries(counts)) total[state] = (total[state] ?? 0) + n;
    return total;
  }

  async close(): Promise<void> {
    await Promise.all([...this.partitions, this.control].map((q) => q.close()));
  }
}
