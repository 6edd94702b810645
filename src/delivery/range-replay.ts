import { setTimeout as sleep } from 'node:timers/promises';
import type { DeliverJob, DeliveryStatus } from '../domain/delivery.js';
import { newId } from '../domain/ids.js';
import type { Task } from '../domain/task.js';
import type { DeliveryHistory } from '../store/delivery-log.js';
import type { EventLogRange, RedisEventLog } from '../store/event-log.js';
import type { RedisEventBudget } from '../store/rate-limiter.js';
import type { RedisReplayTasks } from '../store/replay-tasks.js';
import type { DocWriter } from '../store/versioned-docs.js';
import type { ReplayRangeJob } from './jobs.js';
import type { DeliveryQueues } from './queue.js';

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
export interface CountLimits {
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
  queues: Pick<DeliveryQueues, 'add' | 'addRangeReplay'>;
  tasks: DocWriter<Task>;
  replayTasks: Pick<
    RedisReplayTasks,
    'begin' | 'queued' | 'queuedAll' | 'isCancelled' | 'place' | 'savePlace' | 'view'
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

  /** Creates the task and queues its run (a worker's control queue runs it). */
  async start(vendorId: string, webhookId: string, spec: RangeReplaySpec): Promise<string> {
    const taskId = await this.createTask(vendorId, webhookId);
    await this.deps.queues.addRangeReplay({ taskId, vendorId, webhookId, ...spec });
    return taskId;
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
   * worker died) neither repeats nor skips a page. A cancel stops it before its next page.
   */
  async run(
    job: ReplayRangeJob,
    options: {
      pageSize?: number;
      /** false: end once everything is queued (reads of the task count the outcomes); default true. */
      settle?: boolean;
      onProgress?: (done: number, total: number) => void;
    } = {},
  ): Promise<{ replayed: number }> {
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
      if (options.settle !== false) await this.settle(taskId);
      return { replayed: place.replayed };
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
   * Counts the replays' outcomes until each has one (or `settleForMs` passes): a delivered replay's
   * record may fall off the webhook's recent list soon after, and reads of the task find only what
   * is still there.
   */
  private async settle(taskId: string): Promise<void> {
    const untilMs = this.deps.nowMs() + this.deps.settleForMs;
    while (this.deps.nowMs() < untilMs) {
      const view = await this.deps.replayTasks.view(taskId);
      if (view === undefined || view.task.status === 'success' || view.task.status === 'failed') return;
      await sleep(SETTLE_EVERY_MS);
    }
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
