import { randomUUID } from 'node:crypto';
import type { Logger } from '../logger.js';
import { raceTimer, wakeableSleep } from '../lib/timer-race.js';
import type { RedisReplayQueue, TakenReplay } from '../store/replay-queue.js';
import type { TaskStore } from '../store/read-models.js';
import { JOBS } from '../delivery/jobs.js';
import type { RangeReplayer } from './range-replay.js';

/**
 * A worker's range replays: it takes them from the replays' queue (src/domain/replay-queue.ts:
 * vendors in turn, each within its caps) into a few slots of its own, and runs each for a time
 * slice at most. A run that is not over when its slice ends gives its slot back and waits again at
 * the head of its vendor's line, so a vendor whose replays run long (paced, or waiting for their
 * outcomes) holds a slot one slice at a time while others wait, never for its whole run; its run
 * goes on from its place (see RangeReplayer.run). Each run holds a lease it renews; a run that
 * stops without ending (its worker died, or it failed) is taken up again once the lease lapses.
 */

/** How often an idle runner looks for replays (a slot that frees up looks at once). */
const IDLE_MS = 1_000;

export interface ReplayRunnerOptions {
  queue: Pick<RedisReplayQueue, 'take' | 'renew' | 'release'>;
  rangeReplayer: Pick<RangeReplayer, 'run'>;
  /** Tasks given up are written failed. */
  tasks: TaskStore;
  /** Replays this process runs at once. */
  slots: number;
  /** How long a run keeps its slot before it gives it back (when not over). */
  sliceMs: number;
  /** How long a run's lease lasts unrenewed (renewed every third of it). */
  leaseMs: number;
  logger: Logger;
  nowMs: () => number;
}

export class ReplayRunner {
  private readonly runs = new Map<string, Promise<void>>();
  private stopped = false;
  private loop: Promise<void> | undefined;
  private wake: () => void = () => undefined;

  constructor(private readonly options: ReplayRunnerOptions) {}

  /** Starts taking replays. */
  start(): void {
    this.loop ??= this.takeLoop();
  }

  /**
   * Takes no more replays and asks each run to stop at its next page (it gives its replay back to
   * the queue, for another worker at once), for up to `graceMs`; past that, the leases of runs
   * still going lapse and their replays are taken up elsewhere.
   */
  async close(graceMs: number): Promise<'drained' | 'forced'> {
    this.stopped = true;
    this.wake();
    const drained = Promise.all([this.loop, ...this.runs.values()]).then(() => 'drained' as const);
    return raceTimer(drained, graceMs, 'forced' as const);
  }

  private async takeLoop(): Promise<void> {
    const { queue, slots, leaseMs, logger } = this.options;
    while (!this.stopped) {
      let took = false;
      if (this.runs.size < slots) {
        try {
          const token = randomUUID();
          const { taken, dropped } = await queue.take(token, leaseMs);
          for (const taskId of dropped) await this.giveUp(taskId);
          if (taken !== undefined) {
            took = true;
            this.track(taken, token);
          }
        } catch (error) {
          logger.debug({ err: (error as Error).message }, 'replay queue not polled');
        }
      }
      if (this.stopped) break;
      // Another may be waiting already: look again at once while a slot is free.
      if (took && this.runs.size < slots) continue;
      await wakeableSleep(IDLE_MS, (wake) => (this.wake = wake));
      this.wake = () => undefined;
    }
  }

  /** Keeps a run as this process's until it ends, then frees its slot. */
  private track(taken: TakenReplay, token: string): void {
    const run = this.runOne(taken, token)
      .catch((error: Error) => {
        this.options.logger.warn(
          { taskId: taken.taskId, vendorId: taken.vendorId, err: error.message },
          'range replay run stopped; it is taken up again when its lease lapses',
        );
      })
      .finally(() => {
        this.runs.delete(taken.taskId);
        this.wake();
      });
    this.runs.set(taken.taskId, run);
  }

  /**
   * One slice of a replay's run: renews its lease meanwhile; stops at its next page when the slice
   * is over, the runner closes, or the lease was lost (another worker took it up: nothing is given
   * back then). Thrown errors leave the lease to lapse: the replay is tried again after it.
   */
  private async runOne({ taskId, job }: TakenReplay, token: string): Promise<void> {
    const { queue, rangeReplayer, sliceMs, leaseMs, nowMs } = this.options;
    const parsed = JOBS.replayRange.schema.parse(JSON.parse(job));
    const lease = { held: true };
    const renewal = setInterval(
      () =>
        void queue.renew(taskId, token, leaseMs).then(
          (held) => (lease.held &&= held),
          () => undefined,
        ),
      Math.max(1, Math.floor(leaseMs / 3)),
    );
    const sliceEndsAtMs = nowMs() + sliceMs;
    try {
      const { finished } = await rangeReplayer.run(parsed, {
        shouldStop: () => !lease.held || this.stopped || nowMs() >= sliceEndsAtMs,
      });
      if (lease.held) await queue.release(taskId, token, finished ? 'done' : 'yield');
    } finally {
      clearInterval(renewal);
    }
  }

  /** Writes a task given up as failed, saying why; its progress stays as it was. */
  private async giveUp(taskId: string): Promise<void> {
    const { tasks, nowMs, logger } = this.options;
    const task = await tasks.get(taskId);
    logger.warn({ taskId }, 'range replay given up: its run stopped too often without ending');
    if (task === undefined || task.status === 'success' || task.status === 'failed') return;
    await tasks.put(
      {
        ...task,
        status: 'failed',
        fail_reason:
          'the replay’s run stopped too often without ending (its worker stopped, or the run failed); start it again',
      },
      nowMs(),
    );
  }
}
