import type { DeliverJob } from '../domain/delivery.js';
import type { HeldJob, RedisHeldDeliveries } from '../store/held-deliveries.js';
import type { RedisFifoLines } from '../store/fifo-lines.js';
import { retryWindowMs } from './classify.js';
import type { DeliveryQueues } from './queue.js';

/**
 * Deliveries held while their webhook is paused by its vendor (`PATCH {"enabled": false}`, the
 * portal's Pause). A paused webhook's delivery is not sent and not dead-lettered: it is deferred
 * without an attempt, as the breaker and the rate limit defer (a delayed single job, a parked batch
 * job, or a FIFO line whose head waits), until the end of its retry window counted from its
 * acceptance (`pauseHoldEndMs`). Then, still paused, it is dead-lettered as `paused_expired`
 * (replayable); enabled before, it is sent as if it had just come due, with the attempts it had.
 *
 * Why an index beside the delayed jobs: an enable must send the held deliveries at once, and it may
 * be made by any process (an API, the CLI) while the jobs were deferred by any worker, restarts
 * included. So a hold notes its jobs in Redis (RedisHeldDeliveries) before they exist, and the
 * process that enables (or deletes) the webhook promotes every job noted and wakes its FIFO line.
 *
 * Why no hold is missed: a hold notes its job (1), creates the delayed job (2), then reads the
 * webhook again past any cached copy (3) and, if it is no longer paused, promotes its own job; an
 * enable stores the webhook (A), then reads the index and promotes (B). If B finds the job delayed,
 * B brings it back. If not, either B read the index before 1, or B's promotion came before 2: both
 * times 3 comes after B, so after A, and sees the enable. A FIFO line is the same with the line's
 * ready entry in place of the job: its turn sets the entry to the hold's end, then reads again.
 */
export class PauseHolds {
  constructor(
    private readonly deps: {
      index: Pick<RedisHeldDeliveries, 'add' | 'read' | 'remove'>;
      queues: Pick<DeliveryQueues, 'promote'>;
      lines: Pick<RedisFifoLines, 'wake'>;
      nowMs: () => number;
    },
  ) {}

  /** Notes delayed jobs about to hold `webhookId`'s deliveries until `untilMs`; call before they exist. */
  async hold(webhookId: string, jobs: readonly HeldJob[], untilMs: number): Promise<void> {
    await this.deps.index.add(webhookId, jobs, untilMs, this.deps.nowMs());
  }

  /**
   * Brings back everything held for `webhookId` now (it was enabled or deleted): `jobs` (a hold's
   * own, when its second look found the webhook enabled) and every job noted are promoted (a job
   * that ran meanwhile is left as it is), and its FIFO line is due now.
   */
  async release(webhookId: string, jobs: readonly HeldJob[] = []): Promise<void> {
    await Promise.all([this.deps.lines.wake(webhookId, this.deps.nowMs()), this.promote(webhookId, jobs)]);
    // Bounded: each round forgets what it promoted, and the index holds what the queues hold.
    for (let round = 0; round < 10_000; round++) {
      const noted = await this.deps.index.read(webhookId);
      if (noted.length === 0) return;
      await this.promote(webhookId, noted);
      await this.deps.index.remove(webhookId, noted);
    }
  }

  private promote(webhookId: string, jobs: readonly HeldJob[]): Promise<void> {
    return this.deps.queues.promote(jobs.map((job) => ({ webhookId, ...job })));
  }
}

/** When a delivery held for its webhook's pause is dead-lettered: the end of its retry window, counted from its acceptance. */
export function pauseHoldEndMs(job: Pick<DeliverJob, 'acceptedAtMs'>, scheduleMs: readonly number[]): number {
  return job.acceptedAtMs + retryWindowMs(scheduleMs);
}
