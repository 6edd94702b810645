import { deliverySchema, type DeliverJob } from '../domain/delivery.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

/**
 * The lines of FIFO webhooks in Redis. Per webhook: a sorted set of delivery ids scored by an
 * accept sequence (INCR), the jobs in a hash beside it, and a lease (a random token with a TTL)
 * held by the one worker driving the line. Per queue partition: the ready set, FIFO webhook id →
 * when its head is due (or its lease ends). All of a webhook's keys live under the hash tag of its
 * queue partition, beside the ready set, as its BullMQ jobs do: each change of a line and of its
 * ready entry is one script, atomic, on one Redis Cluster slot, so no crash between two writes
 * can leave a line without its ready entry (never driven) or a lease without its hidden entry.
 */

/** The head of a line: its delivery and the job to send. */
export interface LineHead {
  job: DeliverJob;
}

/** What the FIFO driver needs of the lines. */
export interface FifoLineStore {
  /** Webhooks of `partition` whose ready time has come (at most `limit`), and the earliest ready time of the rest (ms). */
  due(partition: number, nowMs: number, limit: number): Promise<{ webhookIds: string[]; nextAtMs: number | undefined }>;
  /** Takes the line's lease for `leaseMs` when nobody holds it, and hides its ready entry until the lease ends. */
  claim(webhookId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** Extends a lease still held with `token` (and its ready entry with it); false when it was lost. */
  renew(webhookId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** The line's head, or undefined when the line is empty. */
  head(webhookId: string): Promise<LineHead | undefined>;
  /**
   * Removes the head `deliveryId`, only while `token` holds the lease and it is still the head, and
   * answers the next head (undefined: the line is empty); `removed: false` otherwise.
   */
  advance(
    webhookId: string,
    token: string,
    deliveryId: string,
  ): Promise<{ removed: false } | { removed: true; next: LineHead | undefined }>;
  /**
   * Ends a turn while `token` holds the lease: the webhook is ready again at `atMs` (undefined: the
   * line is empty, unless a delivery came meanwhile), and the lease is given back.
   */
  release(webhookId: string, token: string, atMs: number | undefined): Promise<void>;
}

/** What the stats endpoint shows of a line. */
export interface LineSummary {
  length: number;
  /** When the head (the oldest delivery waiting) was accepted; undefined when the line is empty. */
  headAcceptedAtMs: number | undefined;
}

// Appends deliveries (ARGV[3..]: id, job JSON, id, job JSON, …) in the order given, and marks the
// webhook (ARGV[2]) ready at ARGV[1] unless it is marked already (a head waiting for its retry keeps
// its time). A delivery already in the line keeps its place (an ingest repeated after a crash
// appends nothing). Replies how many were new.
const APPEND_LUA = `
local added = 0
for i = 3, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    local seq = redis.call('INCR', KEYS[1])
    redis.call('ZADD', KEYS[2], seq, ARGV[i])
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
    added = added + 1
  end
end
redis.call('ZADD', KEYS[4], 'NX', ARGV[1], ARGV[2])
return added`;

// The head's id and job of a line (its sorted set and jobs hash); a head whose job is missing
// (never written by APPEND_LUA) is dropped.
const HEAD_OF = `
local function headOf(line, jobs)
  for _ = 1, 100 do
    local ids = redis.call('ZRANGE', line, 0, 0)
    if #ids == 0 then return false end
    local job = redis.call('HGET', jobs, ids[1])
    if job then return {ids[1], job} end
    redis.call('ZREM', line, ids[1])
  end
  return false
end`;

const HEAD_LUA = `${HEAD_OF}
return headOf(KEYS[1], KEYS[2])`;

// Removes the head ARGV[2] and answers {1, the next head's id, its job} ({1} when the line is now
// empty), in one round trip. Fenced by the lease and the head's id: a worker whose lease expired
// (another took the line) can never remove what it no longer owns ({0}).
const ADVANCE_LUA = `${HEAD_OF}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local ids = redis.call('ZRANGE', KEYS[2], 0, 0)
if ids[1] ~= ARGV[2] then return {0} end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local following = headOf(KEYS[2], KEYS[3])
if following then return {1, following[1], following[2]} end
return {1}`;

// Claim (ARGV[4] = 'claim': SET NX) or renew (the token must hold): the lease for ARGV[2] ms, and the
// ready entry hidden until the lease ends (ARGV[3]), so that others skip the line meanwhile and, if
// this worker dies, it is due when the lease ends.
const LEASE_LUA = `
if ARGV[4] == 'claim' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 0 end
else
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[5])
return 1`;

// Fenced by the lease: the ready entry at ARGV[2] (empty: removed when the line is empty, else due
// now), then the lease deleted.
const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
elseif redis.call('ZCARD', KEYS[3]) == 0 then redis.call('ZREM', KEYS[2], ARGV[3])
else redis.call('ZADD', KEYS[2], 0, ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1`;

const SUMMARY_LUA = `
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then return {0, false} end
local ids = redis.call('ZRANGE', KEYS[1], 0, 0)
return {n, redis.call('HGET', KEYS[2], ids[1])}`;

type LineKeys = [line: string, jobs: string];
type FencedKeys = [lease: string, line: string, jobs: string];
type LeaseKeys = [lease: string, ready: string];

/** The FIFO lines in Redis; `partitionOf` maps a webhook to its queue partition (jobs.ts). */
export class RedisFifoLines implements FifoLineStore {
  private readonly appendScript: ScriptCall<
    [seq: string, line: string, jobs: string, ready: string],
    (string | number)[],
    number
  >;
  private readonly headScript: ScriptCall<LineKeys, [], [string, string] | null>;
  private readonly advanceScript: ScriptCall<
    FencedKeys,
    [token: string, deliveryId: string],
    [number, string?, string?]
  >;
  private readonly leaseScript: ScriptCall<
    LeaseKeys,
    [token: string, leaseMs: number, hiddenUntilMs: number, mode: 'claim' | 'renew', webhookId: string],
    number
  >;
  private readonly releaseScript: ScriptCall<
    [lease: string, ready: string, line: string],
    [token: string, atMs: number | '', webhookId: string],
    number
  >;
  private readonly summaryScript: ScriptCall<LineKeys, [], [number, string | null]>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'fifo' | 'webhooks'>,
    /** The queue partition of a webhook (jobs.ts partitionOf): its lines live under its hash tag. */
    private readonly partitionOf: (webhookId: string) => number,
    private readonly partitions: number,
  ) {
    this.appendScript = defineScript(redis, { name: 'hooklineFifoAppend', keys: 4, lua: APPEND_LUA });
    this.headScript = defineScript(redis, { name: 'hooklineFifoHead', keys: 2, lua: HEAD_LUA });
    this.advanceScript = defineScript(redis, { name: 'hooklineFifoAdvance', keys: 3, lua: ADVANCE_LUA });
    this.leaseScript = defineScript(redis, { name: 'hooklineFifoLease', keys: 2, lua: LEASE_LUA });
    this.releaseScript = defineScript(redis, { name: 'hooklineFifoRelease', keys: 3, lua: RELEASE_LUA });
    this.summaryScript = defineScript(redis, { name: 'hooklineFifoSummary', keys: 2, lua: SUMMARY_LUA });
  }

  /** Appends deliveries to their webhooks' lines in the order given, and marks each webhook ready (one script per webhook). */
  async append(jobs: readonly DeliverJob[], nowMs: number): Promise<void> {
    const byWebhook = new Map<string, DeliverJob[]>();
    for (const job of jobs) {
      const list = byWebhook.get(job.webhookId);
      if (list) list.push(job);
      else byWebhook.set(job.webhookId, [job]);
    }
    await Promise.all(
      [...byWebhook].map(([webhookId, list]) => {
        const { fifo } = this.keys;
        const n = this.partitionOf(webhookId);
        return this.appendScript(
          [fifo.seq(n, webhookId), fifo.line(n, webhookId), fifo.jobs(n, webhookId), fifo.ready(n)],
          nowMs,
          webhookId,
          ...list.flatMap((job) => [job.deliveryId, JSON.stringify(job)]),
        );
      }),
    );
  }

  /** Whether each webhook has `ordering: fifo` (for replays, which come without the matcher's answer). */
  async areFifo(webhookIds: readonly string[]): Promise<boolean[]> {
    if (webhookIds.length === 0) return [];
    const found = await this.redis.smismember(this.keys.webhooks.fifo, ...webhookIds);
    return found.map((n) => n === 1);
  }

  async due(
    partition: number,
    nowMs: number,
    limit: number,
  ): Promise<{ webhookIds: string[]; nextAtMs: number | undefined }> {
    const ready = this.keys.fifo.ready(partition);
    const [webhookIds, next] = await Promise.all([
      limit > 0 ? this.redis.zrangebyscore(ready, '-inf', nowMs, 'LIMIT', 0, limit) : Promise.resolve([]),
      this.redis.zrangebyscore(ready, `(${nowMs}`, '+inf', 'WITHSCORES', 'LIMIT', 0, 1),
    ]);
    return { webhookIds, nextAtMs: next[1] === undefined ? undefined : Number(next[1]) };
  }

  async claim(webhookId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    return (
      (await this.leaseScript(this.leaseKeys(webhookId), token, leaseMs, nowMs + leaseMs, 'claim', webhookId)) === 1
    );
  }

  async renew(webhookId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    return (
      (await this.leaseScript(this.leaseKeys(webhookId), token, leaseMs, nowMs + leaseMs, 'renew', webhookId)) === 1
    );
  }

  async head(webhookId: string): Promise<LineHead | undefined> {
    const n = this.partitionOf(webhookId);
    const found = await this.headScript([this.keys.fifo.line(n, webhookId), this.keys.fifo.jobs(n, webhookId)]);
    return found === null ? undefined : { job: deliverySchema.parse(JSON.parse(found[1])) };
  }

  async advance(
    webhookId: string,
    token: string,
    deliveryId: string,
  ): Promise<{ removed: false } | { removed: true; next: LineHead | undefined }> {
    const { fifo } = this.keys;
    const n = this.partitionOf(webhookId);
    const [removed, , job] = await this.advanceScript(
      [fifo.lease(n, webhookId), fifo.line(n, webhookId), fifo.jobs(n, webhookId)],
      token,
      deliveryId,
    );
    if (removed !== 1) return { removed: false };
    return { removed: true, next: job === undefined ? undefined : { job: deliverySchema.parse(JSON.parse(job)) } };
  }

  async release(webhookId: string, token: string, atMs: number | undefined): Promise<void> {
    const { fifo } = this.keys;
    const n = this.partitionOf(webhookId);
    await this.releaseScript(
      [fifo.lease(n, webhookId), fifo.ready(n), fifo.line(n, webhookId)],
      token,
      atMs ?? '',
      webhookId,
    );
  }

  /**
   * Makes a webhook's line due at `nowMs` if it has one that waits longer (its head held for a
   * pause). A line being driven shows as due at once; others' claims fail until its turn ends and
   * sets its time.
   */
  async wake(webhookId: string, nowMs: number): Promise<void> {
    await this.redis.zadd(this.keys.fifo.ready(this.partitionOf(webhookId)), 'XX', 'LT', nowMs, webhookId);
  }

  private leaseKeys(webhookId: string): LeaseKeys {
    const n = this.partitionOf(webhookId);
    return [this.keys.fifo.lease(n, webhookId), this.keys.fifo.ready(n)];
  }

  /** The length of a webhook's line and when its head was accepted (the stats endpoint). */
  async summary(webhookId: string): Promise<LineSummary> {
    const n = this.partitionOf(webhookId);
    const [length, head] = await this.summaryScript([
      this.keys.fifo.line(n, webhookId),
      this.keys.fifo.jobs(n, webhookId),
    ]);
    const job = head === null ? undefined : deliverySchema.safeParse(JSON.parse(head));
    return { length, headAcceptedAtMs: job?.success ? job.data.acceptedAtMs : undefined };
  }

  /** FIFO webhooks with deliveries in their line, over all partitions (a gauge read at scrape time). */
  async linesWaiting(): Promise<number> {
    const counts = await Promise.all(
      Array.from({ length: this.partitions }, (_, n) => this.redis.zcard(this.keys.fifo.ready(n))),
    );
    return counts.reduce((sum, n) => sum + n, 0);
  }
}
