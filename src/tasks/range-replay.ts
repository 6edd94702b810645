import { setTimeout as sleep } from 'node:timers/promises';
import type { DeliverJob, DeliveryStatus } from '../domain/delivery.js';
import { newId } from '../domain/ids.js';
import type { Task } from '../domain/task.js';
import type { DeliveryHistory } from '../store/delivery-log.js';
import type { EventLogRange, RedisEventLog } from '../store/event-log.js';
import type { RedisEventBudget } from '../store/rate-limiter.js';
import type { RedisReplayQueue } from '../store/replay-queue.js';
import type { RedisReplayTasks } from '../store/replay-tasks.js';
import type { DocWriter } from '../store/versioned-docs.js';
import type { ReplayRangeJob } from '../delivery/jobs.js';
import type { DeliveryQueues } from '../delivery/queue.js';

/** What a range replay takes from a webhook's event log. */
export interface RangeReplaySpec {
  sinceMs: number;
  untilMs: number;
  /** Only events whose delivery has one of these statuses; absent: any. */
  statuses?: DeliveryStatus[];
  /** Only events of these types; absent: any. */
  eventTypes?: string[];
  /** Replays queued per second at most; absent: as fast as pages are read. */
  ratePerSecond?: number;
}

/** A count of a replay's range, as the API answers it. */
export interface RangeCount {
  count: number;
  /** The count stopped after CountLimits.readMax events of the range: `count` is a lower bound. */
  capped: boolean;
}

/**
 * What bounds the counts the API makes (dry runs, and the count a replay answers with): a count costs
 * Redis time in proportion to the entries it reads (HOOKLINE_REPLAY_COUNT_MAX,
 * HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND).
 */
interface CountLimits {
  /** Entries one count reads at most. */
  readMax: number;
  /** Entries one vendor's counts read per second at most; 0: no budget. */
  budgetPerSecond: number;
  /** The vendors' budgets, by vendor id. */
  budget: Pick<RedisEventBudget, 'take' | 'giveBack'>;
}

/** Events read per page of a run (fewer when the rate is lower: a page never runs ahead of it). */
const PAGE_SIZE = 200;
/** How often a run that queued everything looks at its replays' outcomes, and for how long at most. */
const SETTLE_EVERY_MS = 1_000;

export interface RangeReplayerDeps {
  log: Pick<RedisEventLog, 'page' | 'count' | 'size'>;
  countLimits: CountLimits;
  history: Pick<DeliveryHistory, 'recordQueued' | 'markReplayed'>;
  queues: Pick<DeliveryQueues, 'add'>;
  /** The range replays' queue: a vendor's replays wait there for a worker, within its caps, in turn with other vendors'. */
  queue: Pick<RedisReplayQueue, 'admit' | 'withdraw'>;
  tasks: DocWriter<Task>;
  replayTasks: Pick<
    RedisReplayTasks,
    'begin' | 'queued' | 'queuedAll' | 'isCancelled' | 'place' | 'savePlace' | 'view' | 'forget' | 'cancel'
  >;
  nowMs: () => number;
  /**
   * How long a run that queued everything stays to count its replays' outcomes (they are counted
   * by reads of the task too); default the retry schedule's length, given by the caller.
   */
  settleForMs: number;
}

/**
 * Replays of a time range of a webhook's event log: every event (or those of some statuses or types)
 * sent again as a new delivery linked to its first (`replay_of`), as a task that reports progress,
 * can be cancelled, and holds one page in memory at a time, however long the range.
 */
export class RangeReplayer {
  constructor(private readonly deps: RangeReplayerDeps) {}

  /**
   * How many events a replay of the range would send (a dry run), reading at most `readMax` entries
   * of it (CountLimits.readMax unless given): an operator's count.
   */
  async count(webhookId: string, spec: RangeReplaySpec, readMax = this.deps.countLimits.readMax): Promise<RangeCount> {
    const { count, capped } = await this.deps.log.count(webhookId, rangeOf(spec), readMax);
    return { count, capped };
  }

  /**
   * A vendor's count: as `count`, after taking what it may read from the vendor's budget of this
   * second (the log's size, or readMax when smaller: it never reads more), giving back what it did
   * not read; 'limited' when the budget is spent.
   */
  async vendorCount(vendorId: string, webhookId: string, spec: RangeReplaySpec): Promise<RangeCount | 'limited'> {
    const { readMax, budgetPerSecond, budget } = this.deps.countLimits;
    if (budgetPerSecond <= 0) return this.count(webhookId, spec);
    const atMs = this.deps.nowMs();
    const taken = Math.min(readMax, await this.deps.log.size(webhookId));
    if (!(await budget.take(vendorId, taken, budgetPerSecond, atMs))) return 'limited';
    const { count, read, capped } = await this.deps.log.count(webhookId, rangeOf(spec), readMax);
    await budget.giveBack(vendorId, taken - read, atMs);
    return { count, capped };
  }

  /**
   * Creates a task for each replay and puts them in the vendor's line of the replays' queue (the
   * workers take them in turn with other vendors'), all or none: `full` with what the vendor holds
   * when they would take it past its cap (the tasks made are deleted again).
   */
  async start(
    vendorId: string,
    replays: readonly { webhookId: string; spec: RangeReplaySpec }[],
  ): Promise<{ taskIds: string[] } | { full: number }> {
    const jobs: ReplayRangeJob[] = [];
    for (const { webhookId, spec } of replays)
      jobs.push({ taskId: await this.createTask(vendorId, webhookId), vendorId, webhookId, ...spec });
    const admitted = await this.deps.queue.admit(
      vendorId,
      jobs.map((job) => ({ taskId: job.taskId, job: JSON.stringify(job) })),
    );
    if (admitted.admitted) return { taskIds: jobs.map((job) => job.taskId) };
    await Promise.all(jobs.map((job) => this.deps.replayTasks.forget(job.taskId)));
    return { full: admitted.held };
  }

  /**
   * Cancels a bulk replay of `vendorId`'s (any vendor's when undefined; see RedisReplayTasks.cancel).
   * A range replay still waiting for a worker leaves the queue at once, so it frees its vendor's
   * place, and ends as cancelled with nothing replayed.
   */
  async cancel(taskId: string, vendorId: string | undefined): Promise<'cancelled' | 'not_found' | 'finished'> {
    const outcome = await this.deps.replayTasks.cancel(taskId, vendorId);
    if (outcome === 'cancelled' && (await this.deps.queue.withdraw(taskId)))
      await this.deps.replayTasks.queuedAll(taskId);
    return outcome;
  }

  /** A new pending range replay task (run by a worker, or here by the CLI). */
  async createTask(vendorId: string, webhookId: string): Promise<string> {
    const taskId = newId();
    await this.deps.replayTasks.begin(taskId, vendorId, webhookId, 'range');
    await this.deps.tasks.put({ task_id: taskId, status: 'pending', fail_reason: null }, this.deps.nowMs());
    return taskId;
  }

  /**
   * Reads the range a page at a time from where the task last stood, queues each page's replays
   * (paced to the rate), and notes its place after each page, so a run that starts again (its
   * worker died, or it gave its slot back) neither repeats nor skips a page. A cancel stops it
   * before its next page. `finished` is false when `shouldStop` stopped it first (between pages, or
   * while it counted outcomes): another run goes on from its place.
   */
  async run(
    job: ReplayRangeJob,
    options: {
      pageSize?: number;
      /** false: end once everything is queued (reads of the task count the outcomes); default true. */
      settle?: boolean;
      onProgress?: (done: number, total: number) => void;
      /** Asked before each page and each look at the outcomes: true stops the run there, unfinished. */
      shouldStop?: () => boolean;
    } = {},
  ): Promise<{ replayed: number; finished: boolean }> {
    const shouldStop = options.shouldStop ?? (() => false);
    const { taskId, webhookId, vendorId } = job;
    const range = rangeOf(job);
    const place = await this.deps.replayTasks.place(taskId);
    // The whole range, however long (its run reads all of it anyway), in bounded calls.
    const total = place.total ?? (await this.deps.log.count(webhookId, range)).count;
    const report = async (status: Task['status'], failReason: string | null = null) =>
      this.deps.tasks.put(
        {
          task_id: taskId,
          status,
          fail_reason: failReason,
          progress: { total, done: place.done, queued: place.replayed },
        },
        this.deps.nowMs(),
      );
    const startedAtMs = this.deps.nowMs();
    const startedWith = place.replayed;
    const pageSize = Math.max(1, Math.min(options.pageSize ?? PAGE_SIZE, job.ratePerSecond ?? Infinity));
    try {
      await this.deps.replayTasks.savePlace(taskId, { ...place, total });
      await report('in_progress');
      // Bounded: each page moves the cursor on through a log that holds what its retention allows.
      for (let pages = 0; pages < 10_000_000; pages += 1) {
        if (shouldStop()) return { replayed: place.replayed, finished: false };
        if (await this.deps.replayTasks.isCancelled(taskId)) break;
        const page = await this.deps.log.page(webhookId, {
          ...range,
          ...(place.cursor === undefined ? {} : { after: place.cursor }),
          limit: pageSize,
          withBodies: true,
        });
        const jobs: DeliverJob[] = [];
        const dead: string[] = [];
        for (const event of page.events) {
          if (event.body === undefined) continue;
          if (event.status === 'dead') dead.push(event.deliveryId);
          jobs.push({
            deliveryId: newId(),
            eventId: event.eventId,
            eventType: event.eventType as DeliverJob['eventType'],
            vendorId,
            webhookId,
            body: event.body,
            acceptedAtMs: this.deps.nowMs(),
            replayOf: event.deliveryId,
            manual: true,
          });
        }
        if (jobs.length > 0) {
          await this.pace(startedAtMs, place.replayed - startedWith + jobs.length, job.ratePerSecond);
          // A dead letter replayed here leaves the dead letters, as a replay of it alone would.
          await Promise.all(dead.map((id) => this.deps.history.markReplayed(webhookId, id, this.deps.nowMs())));
          await this.deps.queues.add(jobs);
          await this.deps.history.recordQueued(jobs);
          await this.deps.replayTasks.queued(
            taskId,
            jobs.map((j) => j.deliveryId),
          );
        }
        place.done += page.events.length;
        place.replayed += jobs.length;
        // The last entry read, matched or not (page.next), so filtered entries are not read again.
        const last = page.next ?? page.events.at(-1)?.cursor;
        if (last !== undefined) place.cursor = last;
        await this.deps.replayTasks.savePlace(taskId, place);
        await report('in_progress');
        options.onProgress?.(place.done, total);
        if (page.next === undefined) break;
      }
      await this.deps.replayTasks.queuedAll(taskId);
      if (options.settle === false) return { replayed: place.replayed, finished: true };
      // Its deadline is kept with its place: a run that gave its slot back keeps the first one's.
      if (place.settleUntilMs === undefined) {
        place.settleUntilMs = this.deps.nowMs() + this.deps.settleForMs;
        await this.deps.replayTasks.savePlace(taskId, place);
      }
      return { replayed: place.replayed, finished: await this.settle(taskId, place.settleUntilMs, shouldStop) };
    } catch (error) {
      await report('failed', `replay stopped after ${place.done} of ${total}: ${(error as Error).message}`);
      throw error;
    }
  }

  /** Waits until `queued` replays are within the rate since the run (re)started. */
  private async pace(startedAtMs: number, queued: number, ratePerSecond: number | undefined): Promise<void> {
    if (ratePerSecond === undefined) return;
    const dueAtMs = startedAtMs + ((queued - 1) / ratePerSecond) * 1_000;
    const waitMs = dueAtMs - this.deps.nowMs();
    if (waitMs > 0) await sleep(waitMs);
  }

  /**
   * Counts the replays' outcomes until each has one (or `untilMs` passes): a delivered replay's
   * record may fall off the webhook's recent list soon after, and reads of the task find only what
   * is still there. false when `shouldStop` stopped it first.
   */
  private async settle(taskId: string, untilMs: number, shouldStop: () => boolean): Promise<boolean> {
    while (this.deps.nowMs() < untilMs) {
      if (shouldStop()) return false;
      const view = await this.deps.replayTasks.view(taskId);
      if (view === undefined || view.task.status === 'success' || view.task.status === 'failed') return true;
      await sleep(SETTLE_EVERY_MS);
    }
    return true;
  }
}

function rangeOf(spec: Pick<RangeReplaySpec, 'sinceMs' | 'untilMs' | 'statuses' | 'eventTypes'>): EventLogRange {
  return {
    sinceMs: spec.sinceMs,
    untilMs: spec.untilMs,
    ...(spec.statuses === undefined ? {} : { statuses: spec.statuses }),
    ...(spec.eventTypes === undefined ? {} : { eventTypes: spec.eventTypes }),
  };
}
