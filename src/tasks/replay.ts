import { newId } from '../domain/ids.js';
import type { Task } from '../domain/task.js';
import type { DeliveryHistory } from '../store/delivery-log.js';
import type { RedisReplayTasks } from '../store/replay-tasks.js';
import type { DocWriter } from '../store/versioned-docs.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { DeliveryQueues } from '../delivery/queue.js';

export type ReplayOneResult = { ok: true; deliveryId: string } | { ok: false; reason: 'not_found' | 'not_dead' };

/** Dead-letter replays: one at once, or all of a webhook as an async task. */
export class DeadLetterReplayer {
  constructor(
    private readonly deps: {
      history: DeliveryHistory;
      queues: Pick<DeliveryQueues, 'add' | 'addReplayAll'>;
      tasks: DocWriter<Task>;
      replayTasks: Pick<RedisReplayTasks, 'begin' | 'queued' | 'queuedAll' | 'isCancelled'>;
      nowMs: () => number;
    },
  ) {}

  /** Queues a fresh delivery of a dead letter (a new delivery id; `replayOf` names the old one). */
  async replayOne(webhookId: string, deliveryId: string): Promise<ReplayOneResult> {
    const found = await this.deps.history.get(webhookId, deliveryId);
    if (!found) return { ok: false, reason: 'not_found' };
    // Only dead letters keep their body, so the status decides first.
    if (found.delivery.status !== 'dead' || found.body === undefined) return { ok: false, reason: 'not_dead' };
    // Taking it out of the dead-letter set first makes two racing replays queue it once.
    if (!(await this.deps.history.markReplayed(webhookId, deliveryId, this.deps.nowMs())))
      return { ok: false, reason: 'not_dead' };
    const job: DeliverJob = {
      deliveryId: newId(),
      eventId: found.delivery.eventId,
      eventType: found.delivery.eventType as DeliverJob['eventType'],
      vendorId: found.delivery.vendorId,
      webhookId,
      body: found.body,
      acceptedAtMs: this.deps.nowMs(),
      replayOf: deliveryId,
      manual: true,
    };
    // Queued first, then recorded only where no record exists: a record never names a replay that
    // was not queued, and the id answered can be read at once.
    await this.deps.queues.add([job]);
    await this.deps.history.recordQueued([job]);
    return { ok: true, deliveryId: job.deliveryId };
  }

  /** Creates a pending task and queues the bulk replay; the worker runs it (runReplayAll). */
  async startReplayAll(vendorId: string, webhookId: string): Promise<string> {
    const taskId = await this.createTask(vendorId, webhookId);
    await this.deps.queues.addReplayAll({ taskId, vendorId, webhookId });
    return taskId;
  }

  /** A new pending task for a bulk replay of a vendor's webhook (run by a worker, or here by the CLI). */
  async createTask(vendorId: string, webhookId: string): Promise<string> {
    const taskId = newId();
    await this.deps.replayTasks.begin(taskId, vendorId, webhookId);
    await this.deps.tasks.put({ task_id: taskId, status: 'pending', fail_reason: null }, this.deps.nowMs());
    return taskId;
  }

  /**
   * Queues replays of the dead letters a webhook has when the run starts, in pages, reporting
   * progress. Dead letters that arrive during the run wait for the next one, so the run always ends;
   * a cancel (RedisReplayTasks.cancel) ends it before its next page.
   * The task stays in progress until every replay has an outcome (see RedisReplayTasks).
   */
  async runReplayAll(
    taskId: string,
    webhookId: string,
    options: { pageSize?: number; onProgress?: (done: number, total: number) => void | Promise<void> } = {},
  ): Promise<{ replayed: number; skipped: number }> {
    const pageSize = options.pageSize ?? 100;
    const report = async (status: Task['status'], done: number, total: number, failReason: string | null = null) => {
      await options.onProgress?.(done, total);
      await this.deps.tasks.put(
        { task_id: taskId, status, fail_reason: failReason, progress: { total, done, queued: replayed } },
        this.deps.nowMs(),
      );
    };
    // Counted, not listed: the ids are read a page at a time, so no run holds them all in memory.
    const total = await this.deps.history.deadLetterCount(webhookId);
    let done = 0;
    let replayed = 0;
    try {
      await report('in_progress', 0, total);
      while (done < total) {
        // A cancel stops the run between pages; the task then ends once what was queued has outcomes.
        if (await this.deps.replayTasks.isCancelled(taskId)) break;
        const ids = await this.deps.history.deadLetterIds(webhookId, Math.min(pageSize, total - done));
        if (ids.length === 0) break;
        const queued: string[] = [];
        for (const id of ids) {
          const result = await this.replayOne(webhookId, id);
          if (result.ok) queued.push(result.deliveryId);
          // An id whose record has expired (or that is no longer dead) cannot be replayed: it leaves
          // the set, or every later page would start with it again and the run would never get past it.
          else await this.deps.history.forgetDeadLetter(webhookId, id);
          done += 1;
        }
        await this.deps.replayTasks.queued(taskId, queued);
        replayed += queued.length;
        await report('in_progress', done, total);
      }
      await this.deps.replayTasks.queuedAll(taskId);
      return { replayed, skipped: done - replayed };
    } catch (error) {
      await report('failed', done, total, `replay stopped after ${done} of ${total}: ${(error as Error).message}`);
      throw error;
    }
  }
}
