import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** A delayed job holding deliveries of a paused webhook: its own single job, or a parked batch job. */
export interface HeldJob {
  jobId: string;
  parked: boolean;
}

/** Jobs read from one webhook's index at most per call. */
const READ_MAX = 500;

const memberOf = (job: HeldJob) => `${job.parked ? 'p' : 's'}:${job.jobId}`;
const jobOf = (member: string): HeldJob => ({ parked: member.startsWith('p:'), jobId: member.slice(2) });

/**
 * Which delayed jobs hold a paused webhook's deliveries, so that whichever process enables the
 * webhook (the API, the portal, the CLI) can bring them back at once instead of at the end of their
 * hold. One sorted set per webhook under its delivery log's hash tag, scored by when each hold ends:
 * a job whose hold has ended ran by itself, so its entry is dropped at the next write, and the key
 * expires with the last hold.
 */
export class RedisHeldDeliveries {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
  ) {}

  /** Notes jobs holding the webhook's deliveries until `untilMs` (one round trip). */
  async add(webhookId: string, jobs: readonly HeldJob[], untilMs: number, nowMs: number): Promise<void> {
    if (jobs.length === 0) return;
    const key = this.keys.deliveries.held(webhookId);
    const ttlMs = Math.max(1, Math.ceil(untilMs - nowMs));
    await this.redis
      .multi()
      .zadd(key, ...jobs.flatMap((job) => [untilMs, memberOf(job)]))
      .zremrangebyscore(key, '-inf', nowMs)
      // A new key gets the hold's TTL; an existing one only ever a longer one.
      .pexpire(key, ttlMs, 'NX')
      .pexpire(key, ttlMs, 'GT')
      .exec();
  }

  /** Up to READ_MAX of the jobs noted for the webhook, oldest hold first. */
  async read(webhookId: string): Promise<HeldJob[]> {
    return (await this.redis.zrange(this.keys.deliveries.held(webhookId), 0, READ_MAX - 1)).map(jobOf);
  }

  /** Forgets jobs that were brought back. */
  async remove(webhookId: string, jobs: readonly HeldJob[]): Promise<void> {
    if (jobs.length === 0) return;
    await this.redis.zrem(this.keys.deliveries.held(webhookId), ...jobs.map(memberOf));
  }
}
