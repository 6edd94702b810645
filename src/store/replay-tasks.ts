import type { Task } from '../domain/task.js';
import type { DeliveryStatus } from '../domain/delivery.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import type { TaskStore } from './read-models.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/** A replay's outcome once its delivery has one: delivered, or failed (dead again, or dropped with its webhook). */
const OUTCOME_OF: Partial<Record<DeliveryStatus, 'delivered' | 'failed'>> = {
  delivered: 'delivered',
  dead: 'failed',
  dropped: 'failed',
  replayed: 'failed',
};

/** How long a replay task's bookkeeping lives (as long as a finished task document). */
const BOOKKEEPING_TTL_MS = 30 * 24 * 3_600_000;
/** Open replays looked at per round of a read of the task, and rounds per read; a larger task catches up over a few polls. */
const CHECK_PER_ROUND = 1_000;
const ROUNDS_PER_READ = 5;

/** What a replay task replays: a webhook's dead letters, or the events of a time range of its log. */
export type ReplayTaskKind = 'dead_letters' | 'range';

/** Where a range replay's run stands, kept so a run that starts again goes on from there. */
export interface ReplayPlace {
  /** The log cursor of the last event read; absent before the first page. */
  cursor: string | undefined;
  /** Events read so far (replayed or not). */
  done: number;
  /** Replays queued so far. */
  replayed: number;
  /** The range's count when the run began; absent before. */
  total: number | undefined;
  /** Until when (ms) a run that queued everything stays to count its replays' outcomes; absent before it first did. */
  settleUntilMs: number | undefined;
}

/** A replay task as its reader sees it, with the vendor that started it. */
export interface ReplayTaskView {
  task: Task;
  /** The vendor whose webhook's dead letters it replays; undefined for tasks that are no bulk replay. */
  vendorId: string | undefined;
}

/**
 * The honest progress of bulk replays. Queueing a replay is not delivering it: the task notes each
 * replay it queued, and a read of the task looks up which of them have an outcome since (delivered,
 * or failed again). The task ends when every replay has an outcome: success when all were
 * delivered, failed (saying how many) when some were not.
 */
export class RedisReplayTasks {
  private readonly settleScript: ScriptCall<[open: string, state: string], string[], number>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'replayTask' | 'task'>,
    private readonly tasks: TaskStore,
    private readonly progressOf: (
      refs: readonly { webhookId: string; deliveryId: string }[],
    ) => Promise<({ status: DeliveryStatus } | undefined)[]>,
    private readonly nowMs: () => number,
  ) {
    this.settleScript = defineScriptFile(redis, 'replay-tasks-settle', 2);
  }

  /** Notes who started a replay task, before anything is queued. */
  async begin(
    taskId: string,
    vendorId: string,
    webhookId: string,
    kind: ReplayTaskKind = 'dead_letters',
  ): Promise<void> {
    const state = this.keys.replayTask.state(taskId);
    await this.redis
      .multi()
      .hset(state, { vendorId, webhookId, kind, delivered: 0, failed: 0 })
      .pexpire(state, BOOKKEEPING_TTL_MS)
      .exec();
  }

  /** Notes replays just queued (their new delivery ids). */
  async queued(taskId: string, deliveryIds: readonly string[]): Promise<void> {
    if (deliveryIds.length === 0) return;
    const open = this.keys.replayTask.open(taskId);
    await this.redis
      .multi()
      .sadd(open, ...deliveryIds)
      .pexpire(open, BOOKKEEPING_TTL_MS)
      .exec();
  }

  /**
   * Stops a running bulk replay of `vendorId`'s (any vendor's when undefined) at its next page: what was queued stays queued, the
   * dead letters not reached stay dead letters, and the task ends (failed, saying so) once the queued
   * replays have outcomes. `not_found` for an unknown task or another vendor's; `finished` when it
   * had ended already.
   */
  async cancel(taskId: string, vendorId: string | undefined): Promise<'cancelled' | 'not_found' | 'finished'> {
    const [task, owner] = await Promise.all([
      this.tasks.get(taskId),
      this.redis.hget(this.keys.replayTask.state(taskId), 'vendorId'),
    ]);
    // No owner: no bulk replay. A vendor's cancel reaches its own tasks only; an operator's (no vendor) any.
    if (task === undefined || owner === null || (vendorId !== undefined && owner !== vendorId)) return 'not_found';
    if (task.status === 'success' || task.status === 'failed') return 'finished';
    await this.redis.hset(this.keys.replayTask.state(taskId), 'cancelled', '1');
    return 'cancelled';
  }

  /** Where a range replay's run stands (see ReplayPlace). */
  async place(taskId: string): Promise<ReplayPlace> {
    const [cursor, done, replayed, total, settleUntilMs] = await this.redis.hmget(
      this.keys.replayTask.state(taskId),
      'cursor',
      'done',
      'replayed',
      'total',
      'settleUntilMs',
    );
    return {
      cursor: cursor ?? undefined,
      done: Number(done ?? 0),
      replayed: Number(replayed ?? 0),
      total: total === null ? undefined : Number(total),
      settleUntilMs: settleUntilMs === null ? undefined : Number(settleUntilMs),
    };
  }

  /** Notes where a range replay's run stands, after a page's replays are noted (`queued`). */
  async savePlace(taskId: string, place: ReplayPlace): Promise<void> {
    await this.redis.hset(this.keys.replayTask.state(taskId), {
      done: place.done,
      replayed: place.replayed,
      ...(place.cursor === undefined ? {} : { cursor: place.cursor }),
      ...(place.total === undefined ? {} : { total: place.total }),
      ...(place.settleUntilMs === undefined ? {} : { settleUntilMs: place.settleUntilMs }),
    });
  }

  /** Deletes a task that never ran (its admission was refused): its bookkeeping and document. */
  async forget(taskId: string): Promise<void> {
    const { state, open } = this.keys.replayTask;
    await this.redis.del(state(taskId), open(taskId), this.keys.task(taskId));
  }

  /** Whether the task was cancelled (its run stops before its next page). */
  async isCancelled(taskId: string): Promise<boolean> {
    return (await this.redis.hget(this.keys.replayTask.state(taskId), 'cancelled')) === '1';
  }

  /** Every replay is queued: from now the task ends as soon as the last one has an outcome. */
  async queuedAll(taskId: string): Promise<void> {
    await this.redis.hset(this.keys.replayTask.state(taskId), 'queuedAll', '1');
  }

  /** The task with its replays' outcomes counted; finished tasks are written back as such. */
  async view(taskId: string): Promise<ReplayTaskView | undefined> {
    const task = await this.tasks.get(taskId);
    if (!task) return undefined;
    const { state: stateKey, open: openKey } = this.keys.replayTask;
    const state = await this.redis.hgetall(stateKey(taskId));
    if (state.webhookId === undefined || state.vendorId === undefined) return { task, vendorId: undefined };
    if (task.status === 'success' || task.status === 'failed') return { task, vendorId: state.vendorId };

    const webhookId = state.webhookId;
    for (let round = 0; round < ROUNDS_PER_READ; round += 1) {
      const [, open] = await this.redis.sscan(openKey(taskId), 0, 'COUNT', CHECK_PER_ROUND);
      if (open.length === 0) break;
      const progress = await this.progressOf(open.map((deliveryId) => ({ webhookId, deliveryId })));
      const settled = open.flatMap((id, i) => {
        // No record yet (it is written just after the replay is queued), or a pending one: the
        // replay waits for its first attempt.
        const status = progress[i]?.status;
        const outcome = status === undefined ? undefined : OUTCOME_OF[status];
        return outcome === undefined ? [] : [id, outcome];
      });
      if (settled.length === 0) break;
      await this.settleScript([openKey(taskId), stateKey(taskId)], ...settled);
    }
    const [counts, stillOpen] = await Promise.all([
      this.redis.hmget(stateKey(taskId), 'delivered', 'failed', 'queuedAll', 'cancelled'),
      this.redis.scard(openKey(taskId)),
    ]);
    const delivered = Number(counts[0] ?? 0);
    const failed = Number(counts[1] ?? 0);
    // Once every replay is queued, the run's last progress is written (it is written before
    // queuedAll): the document read at the start of this view may predate it, so read it again.
    const latest = counts[2] === '1' ? ((await this.tasks.get(taskId)) ?? task) : task;
    // The open set may be ahead of the document (a page is noted before its progress is written).
    const queued = Math.max(latest.progress?.queued ?? 0, delivered + failed + stillOpen);
    const progress = {
      ...latest.progress,
      total: latest.progress?.total ?? queued,
      done: latest.progress?.done ?? 0,
      queued,
      delivered,
      failed,
      pending: stillOpen,
      ...(counts[3] === '1' ? { cancelled: true as const } : {}),
    };
    if (counts[2] !== '1' || stillOpen > 0) return { task: { ...task, progress }, vendorId: state.vendorId };

    const outcomes = `${delivered} delivered, ${failed} failed again`;
    const finished: Task =
      counts[3] === '1'
        ? {
            task_id: taskId,
            status: 'failed',
            fail_reason:
              state.kind === 'range'
                ? `cancelled after ${queued} of ${progress.total} events were replayed (${outcomes})`
                : `cancelled after ${queued} of ${progress.total} dead letters were replayed (${outcomes}); the others stay dead letters`,
            progress,
          }
        : failed === 0
          ? { task_id: taskId, status: 'success', fail_reason: null, progress }
          : {
              task_id: taskId,
              status: 'failed',
              fail_reason: `${failed} of ${queued} replayed deliveries failed again (see the webhook's dead letters); ${delivered} delivered`,
              progress,
            };
    await this.tasks.put(finished, this.nowMs());
    return { task: finished, vendorId: state.vendorId };
  }
}
