import { RECLAIMS_PER_TAKE, type ReplayQueueLimits } from '../domain/replay-queue.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptArg, type ScriptCall } from './scripts.js';

// The steps of src/domain/replay-queue.ts, in Redis (keys.replayQueue, one hash tag). A vendor's
// line and running set are named by its id after a prefix the call passes (the keys' own builder
// makes it), so every key of a call shares the tag's slot. Times are ms; `now` is Redis's clock
// (TIME), one clock for every worker, unless a call passes one (the conformance test).
const NOW_FN = `
local function nowMs(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function wait(vendors, line, vendor, id, where)
  local length
  if where == 'head' then length = redis.call('LPUSH', line, id) else length = redis.call('RPUSH', line, id) end
  if length == 1 then redis.call('RPUSH', vendors, vendor) end
end`;

// KEYS: vendors, owners, jobs. ARGV: waiting prefix, running prefix, vendor, heldMax, then per replay
// its task id and job. Replies -1 when admitted, else what the vendor holds (nothing is admitted).
const ADMIT_LUA = `${NOW_FN}
local vendors, owners, jobs = KEYS[1], KEYS[2], KEYS[3]
local waitingPrefix, runningPrefix, vendor, heldMax = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local line = waitingPrefix .. vendor
local held = redis.call('LLEN', line) + redis.call('ZCARD', runningPrefix .. vendor)
if held + (#ARGV - 4) / 2 > heldMax then return held end
for i = 5, #ARGV, 2 do
  redis.call('HSET', owners, ARGV[i], vendor)
  redis.call('HSET', jobs, ARGV[i], ARGV[i + 1])
  wait(vendors, line, vendor, ARGV[i], 'end')
end
return -1`;

// KEYS: vendors, leases, tokens, owners, tries, jobs. ARGV: waiting prefix, running prefix, now,
// token, leaseMs, runningMax, triesMax. Replies {task id, vendor, job, dropped ids}; '' for the
// first three when nothing may run.
const TAKE_LUA = `${NOW_FN}
local vendors, leases, tokens, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local waitingPrefix, runningPrefix = ARGV[1], ARGV[2]
local now, token, leaseMs = nowMs(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local runningMax, triesMax = tonumber(ARGV[6]), tonumber(ARGV[7])
local dropped = {}
local lapsed = redis.call('ZRANGEBYSCORE', leases, '-inf', string.format('%.0f', now), 'LIMIT', 0, ${RECLAIMS_PER_TAKE})
for _, id in ipairs(lapsed) do
  local vendor = redis.call('HGET', owners, id)
  redis.call('ZREM', leases, id)
  redis.call('HDEL', tokens, id)
  redis.call('ZREM', runningPrefix .. vendor, id)
  if redis.call('HINCRBY', tries, id, 1) > triesMax then
    redis.call('HDEL', tries, id)
    redis.call('HDEL', owners, id)
    redis.call('HDEL', jobs, id)
    dropped[#dropped + 1] = id
  else
    wait(vendors, waitingPrefix .. vendor, vendor, id, 'head')
  end
end
local turns = redis.call('LLEN', vendors)
for _ = 1, turns do
  local vendor = redis.call('LMOVE', vendors, vendors, 'LEFT', 'RIGHT')
  if redis.call('ZCARD', runningPrefix .. vendor) < runningMax then
    local line = waitingPrefix .. vendor
    local id = redis.call('LPOP', line)
    if redis.call('LLEN', line) == 0 then redis.call('RPOP', vendors) end
    local untilMs = string.format('%.0f', now + leaseMs)
    redis.call('ZADD', runningPrefix .. vendor, untilMs, id)
    redis.call('ZADD', leases, untilMs, id)
    redis.call('HSET', tokens, id, token)
    return {id, vendor, redis.call('HGET', jobs, id) or '', dropped}
  end
end
return {'', '', '', dropped}`;

// KEYS: leases, tokens, owners. ARGV: running prefix, task id, token, now, leaseMs. Replies 1, or 0
// when the token no longer holds the lease.
const RENEW_LUA = `${NOW_FN}
local leases, tokens, owners = KEYS[1], KEYS[2], KEYS[3]
local runningPrefix, id, token = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', tokens, id) ~= token then return 0 end
local untilMs = string.format('%.0f', nowMs(ARGV[4]) + tonumber(ARGV[5]))
redis.call('ZADD', leases, untilMs, id)
redis.call('ZADD', runningPrefix .. redis.call('HGET', owners, id), untilMs, id)
return 1`;

// KEYS: vendors, leases, tokens, owners, tries, jobs. ARGV: waiting prefix, running prefix, task id,
// token, 'done' or 'yield' (the vendor then goes to the end of the turn order). Replies 1, or 0
// when the token no longer holds the lease.
const RELEASE_LUA = `
local vendors, leases, tokens, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local waitingPrefix, runningPrefix, id, token, how = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HGET', tokens, id) ~= token then return 0 end
local vendor = redis.call('HGET', owners, id)
redis.call('ZREM', leases, id)
redis.call('HDEL', tokens, id)
redis.call('ZREM', runningPrefix .. vendor, id)
if how == 'done' then
  redis.call('HDEL', tries, id)
  redis.call('HDEL', owners, id)
  redis.call('HDEL', jobs, id)
else
  redis.call('LREM', vendors, 1, vendor)
  redis.call('RPUSH', vendors, vendor)
  redis.call('LPUSH', waitingPrefix .. vendor, id)
end
return 1`;

// KEYS: vendors, owners, tries, jobs. ARGV: waiting prefix, task id. Replies 1 when the replay was
// waiting (and is gone), else 0.
const WITHDRAW_LUA = `
local vendors, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waitingPrefix, id = ARGV[1], ARGV[2]
local vendor = redis.call('HGET', owners, id)
if not vendor then return 0 end
local line = waitingPrefix .. vendor
if redis.call('LREM', line, 1, id) == 0 then return 0 end
redis.call('HDEL', owners, id)
redis.call('HDEL', tries, id)
redis.call('HDEL', jobs, id)
if redis.call('LLEN', line) == 0 then redis.call('LREM', vendors, 0, vendor) end
return 1`;

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
    this.admitScript = defineScript(redis, { name: 'hooklineReplayAdmit', keys: 3, lua: ADMIT_LUA });
    this.takeScript = defineScript(redis, { name: 'hooklineReplayTake', keys: 'varying', lua: TAKE_LUA });
    this.renewScript = defineScript(redis, { name: 'hooklineReplayRenew', keys: 3, lua: RENEW_LUA });
    this.releaseScript = defineScript(redis, { name: 'hooklineReplayRelease', keys: 'varying', lua: RELEASE_LUA });
    this.withdrawScript = defineScript(redis, { name: 'hooklineReplayWithdraw', keys: 4, lua: WITHDRAW_LUA });
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
