import { RECLAIMS_PER_TAKE, type ReplayQueueLimits } from '../domain/replay-queue.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

/** A replay taken to run: its task, vendor and job (as admitted), leased to the token given. */
export interface TakenReplay {
  taskId: string;
  vendorId: string;
  job: string;
}

/**
 * The range replays' queue in Redis, shared by every API process (admission) and worker (taking,
 * renewing, releasing): see src/domain/replay-queue.ts for the rules. Every structure is bounded:
 * a vendor's line and running set by `heldMax`, the turn order by the vendors with replays waiting.
 * Its scripts (lua/replay-queue-*.lua) are the steps of the domain's rules, in Redis (keys.replayQueue,
 * one hash tag): a vendor's line and running set are named by its id after a prefix the call passes
 * (the keys' own builder makes it), so every key of a call shares the tag's slot. Times are ms.
 */
export class RedisReplayQueue {
  private readonly admitScript: ScriptCall<[string, string, string], ScriptArg[], number>;
  private readonly takeScript: ScriptCall<string[], ScriptArg[], [string, string, string, string[]]>;
  private readonly renewScript: ScriptCall<[string, string, string], ScriptArg[], number>;
  private readonly releaseScript: ScriptCall<string[], ScriptArg[], number>;
  private readonly withdrawScript: ScriptCall<[string, string, string, string], ScriptArg[], number>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'replayQueue'>,
    private readonly limits: ReplayQueueLimits,
  ) {
    this.admitScript = defineScriptFile(redis, 'replay-queue-admit', 3);
    this.takeScript = defineScriptFile(redis, 'replay-queue-take', 'varying');
    this.renewScript = defineScriptFile(redis, 'replay-queue-renew', 3);
    this.releaseScript = defineScriptFile(redis, 'replay-queue-release', 'varying');
    this.withdrawScript = defineScriptFile(redis, 'replay-queue-withdraw', 4);
  }

  /** Admits the vendor's replays (task id and job each), all or none; refused: what the vendor holds. */
  async admit(
    vendorId: string,
    replays: readonly { taskId: string; job: string }[],
  ): Promise<{ admitted: true } | { admitted: false; held: number }> {
    const q = this.keys.replayQueue;
    const held = await this.admitScript(
      [q.vendors, q.owners, q.jobs],
      q.waiting(''),
      q.running(''),
      vendorId,
      this.limits.heldMax,
      ...replays.flatMap((r) => [r.taskId, r.job]),
    );
    return held < 0 ? { admitted: true } : { admitted: false, held };
  }

  /**
   * The next replay to run, leased to `token` for `leaseMs`, if any may run; and the ids of replays
   * given up (their lease lapsed `triesMax` times). `nowMs`: the conformance test's clock.
   */
  async take(
    token: string,
    leaseMs: number,
    nowMs: number | '' = '',
  ): Promise<{ taken: TakenReplay | undefined; dropped: string[] }> {
    const q = this.keys.replayQueue;
    const [taskId, vendorId, job, dropped] = await this.takeScript(
      [q.vendors, q.leases, q.tokens, q.owners, q.tries, q.jobs],
      q.waiting(''),
      q.running(''),
      nowMs,
      token,
      leaseMs,
      this.limits.runningMax,
      this.limits.triesMax,
      RECLAIMS_PER_TAKE,
    );
    return { taken: taskId === '' ? undefined : { taskId, vendorId, job }, dropped };
  }

  /** Extends the lease `token` holds on the replay; false when it no longer holds it. */
  async renew(taskId: string, token: string, leaseMs: number, nowMs: number | '' = ''): Promise<boolean> {
    const q = this.keys.replayQueue;
    return (await this.renewScript([q.leases, q.tokens, q.owners], q.running(''), taskId, token, nowMs, leaseMs)) === 1;
  }

  /** Ends a run: `done` (the replay leaves the queue) or `yield` (it waits again); false when `token` no longer holds it. */
  async release(taskId: string, token: string, how: 'done' | 'yield'): Promise<boolean> {
    const q = this.keys.replayQueue;
    return (
      (await this.releaseScript(
        [q.vendors, q.leases, q.tokens, q.owners, q.tries, q.jobs],
        q.waiting(''),
        q.running(''),
        taskId,
        token,
        how,
      )) === 1
    );
  }

  /** Takes a waiting replay out (cancelled before it ran); false when it is not waiting. */
  async withdraw(taskId: string): Promise<boolean> {
    const q = this.keys.replayQueue;
    return (await this.withdrawScript([q.vendors, q.owners, q.tries, q.jobs], q.waiting(''), taskId)) === 1;
  }

  /** Takes every waiting replay of the vendor out (its data is being erased); how many. */
  async withdrawVendor(vendorId: string): Promise<number> {
    let withdrawn = 0;
    for (const taskId of await this.redis.lrange(this.keys.replayQueue.waiting(vendorId), 0, -1))
      if (await this.withdraw(taskId)) withdrawn += 1;
    return withdrawn;
  }

  /** What the vendor holds: replays waiting, and running. */
  async held(vendorId: string): Promise<{ waiting: number; running: number }> {
    const q = this.keys.replayQueue;
    const [waiting, running] = await Promise.all([
      this.redis.llen(q.waiting(vendorId)),
      this.redis.zcard(q.running(vendorId)),
    ]);
    return { waiting, running };
  }
}
