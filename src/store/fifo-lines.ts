import { deliverySchema, type DeliverJob } from '../domain/delivery.js';
import { ORDERING_KEY_BUCKETS } from '../domain/ordering-key.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

/**
 * The lines of FIFO webhooks in Redis. A line is a sorted set of delivery ids scored by an accept
 * sequence (INCR), the jobs in a hash beside it, and a lease (a random token with a TTL) held by the
 * one worker driving the line. A webhook has its own line and, once it has an ordering key, one line
 * per bucket of the key's values (domain/ordering-key.ts): at most ORDERING_KEY_BUCKETS + 1 lines
 * whatever the values. Per queue partition: the ready set, line id → when its head is due (or its
 * lease ends). All of a webhook's lines live under the hash tag of its queue partition, beside the
 * ready set, as its BullMQ jobs do: each change of a line and of its ready entry is one script,
 * atomic, on one Redis Cluster slot, so no crash between two writes can leave a line without its
 * ready entry (never driven) or a lease without its hidden entry; and one script appends to every
 * line of a partition that an ingest batch reaches.
 *
 * Why an empty line leaves no key: the sorted set and the hash go with their last member, and the
 * script that removes the last delivery deletes the sequence with it, so a line idle after a burst of
 * key values costs nothing. Deleting the sequence keeps the order: it only orders the deliveries
 * waiting in its line, and there are none; the next append starts it again.
 *
 * How long heads wait (the gauge hookline_fifo_oldest_head_age_seconds): per queue partition, the
 * heads index, line id → since when its head has been the head: since it was appended to an empty
 * line, or since the delivery before it left the line. That is the time the line has stood on one
 * delivery, whatever the delivery's own age: a long line whose heads go out one after another keeps
 * it short, a head that keeps failing or is held back (breaker, rate limit, Retry-After, no worker
 * free to drive it) makes it grow. The scripts that set or remove a head keep the entry with it, in
 * the same call: an append to an empty line adds it, a removal sets it to the next head or removes
 * it with the last delivery, so an empty line has no entry either. A paused webhook's heads are left
 * out: a turn that finds its head held for the pause removes the entry, and the next turn after
 * the enable (or at the hold's end) adds it again, from then; a pause is the webhook owner's choice,
 * not a line held back. A line with no entry (paused, or waiting from before the index existed)
 * gets one at its next turn. Reading the oldest is one ZRANGE (and one EXISTS of its line) per
 * partition, however many lines wait.
 */

/** The id of a line (its ready-set member and the infix of its keys): the webhook's own line, or bucket `bucket` of its ordering key. */
export function lineIdOf(webhookId: string, bucket?: number): string {
  return bucket === undefined ? webhookId : `${webhookId}:k${bucket}`;
}

/** The webhook whose line `lineId` is. */
export function webhookOfLine(lineId: string): string {
  const at = lineId.search(/:k\d+$/);
  return at < 0 ? lineId : lineId.slice(0, at);
}

/** Every line a webhook can have: its own, then its ordering key's buckets. */
export function linesOf(webhookId: string): string[] {
  return [webhookId, ...Array.from({ length: ORDERING_KEY_BUCKETS }, (_, bucket) => lineIdOf(webhookId, bucket))];
}

/** A delivery to append: its job, and the bucket of its webhook's ordering key it falls in (undefined: the webhook's own line). */
export interface LineEntry {
  job: DeliverJob;
  bucket?: number;
}

/** How a webhook's deliveries are lined (undefined where a webhook is not FIFO). */
export interface FifoOrdering {
  /** The path whose value picks a delivery's bucket; undefined: every delivery in the webhook's own line. */
  orderingKey: string | undefined;
}

/** The head of a line: its delivery and the job to send. */
export interface LineHead {
  job: DeliverJob;
}

/** What the FIFO driver needs of the lines; a line is named by its id (lineIdOf). */
export interface FifoLineStore {
  /** Lines of `partition` whose ready time has come (at most `limit`), and the earliest ready time of the rest (ms). */
  due(partition: number, nowMs: number, limit: number): Promise<{ lineIds: string[]; nextAtMs: number | undefined }>;
  /** Takes the line's lease for `leaseMs` when nobody holds it, and hides its ready entry until the lease ends. */
  claim(lineId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** Extends a lease still held with `token` (and its ready entry with it); false when it was lost. */
  renew(lineId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** The line's head, or undefined when the line is empty; a head not counted as waiting (see the top of this file) waits from `nowMs`. */
  head(lineId: string, nowMs: number): Promise<LineHead | undefined>;
  /**
   * Removes the head `deliveryId`, only while `token` holds the lease and it is still the head, and
   * answers the next head (undefined: the line is empty), which waits from `nowMs`; `removed: false` otherwise.
   */
  advance(
    lineId: string,
    token: string,
    deliveryId: string,
    nowMs: number,
  ): Promise<{ removed: false } | { removed: true; next: LineHead | undefined }>;
  /**
   * Ends a turn while `token` holds the lease: the line is ready again at `atMs` (undefined: it is
   * empty, unless a delivery came meanwhile), and the lease is given back. `paused`: the head is
   * held for its webhook's pause, and is not counted as waiting until the line's next turn.
   */
  release(lineId: string, token: string, atMs: number | undefined, paused?: boolean): Promise<void>;
}

/** What the stats endpoint shows of a webhook's lines. */
export interface LineSummary {
  length: number;
  /** When the oldest head (the oldest delivery waiting) was accepted; undefined when the lines are empty. */
  headAcceptedAtMs: number | undefined;
}

// Appends deliveries to the lines of one partition, each in the order given, and marks each line
// ready at ARGV[1] unless it is marked already (a head waiting for its retry keeps its time); a line
// that was empty has a new head, waiting from ARGV[1]. KEYS[1] is the ready set, KEYS[2] the heads
// index, then three keys a line: its sequence, its sorted set, its jobs. ARGV after the time, a line
// after another: its id, how many deliveries follow, then id, job JSON, id, job JSON, ….
// A delivery already in its line keeps its place (an ingest repeated after a crash appends nothing).
// Replies how many were new.
const APPEND_LUA = `
local added = 0
local at = 2
for k = 3, #KEYS, 3 do
  local lineId, count = ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  if redis.call('EXISTS', KEYS[k + 1]) == 0 then redis.call('ZADD', KEYS[2], ARGV[1], lineId) end
  for _ = 1, count do
    if not redis.call('ZSCORE', KEYS[k + 1], ARGV[at]) then
      local seq = redis.call('INCR', KEYS[k])
      redis.call('ZADD', KEYS[k + 1], seq, ARGV[at])
      redis.call('HSET', KEYS[k + 2], ARGV[at], ARGV[at + 1])
      added = added + 1
    end
    at = at + 2
  end
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], lineId)
end
return added`;

// The head's id and job of a line (its sorted set and jobs hash); a head whose job is missing
// (never written by APPEND_LUA) is dropped. A line found empty has its sequence deleted: it was the
// line's last key.
const HEAD_OF = `
local function headOf(line, jobs, seq)
  for _ = 1, 100 do
    local ids = redis.call('ZRANGE', line, 0, 0)
    if #ids == 0 then
      redis.call('DEL', seq)
      return false
    end
    local job = redis.call('HGET', jobs, ids[1])
    if job then return {ids[1], job} end
    redis.call('ZREM', line, ids[1])
  end
  return false
end`;

// The head of a line (KEYS: its sorted set, jobs, sequence, then the heads index; ARGV: the time,
// the line id). A head without an entry in the index (its webhook was paused, or the line waits from
// before the index) waits from now; an empty line has none.
const HEAD_LUA = `${HEAD_OF}
local found = headOf(KEYS[1], KEYS[2], KEYS[3])
if found then redis.call('ZADD', KEYS[4], 'NX', ARGV[1], ARGV[2])
else redis.call('ZREM', KEYS[4], ARGV[2]) end
return found`;

// Removes the head ARGV[2] and answers {1, the next head's id, its job} ({1} when the line is now
// empty), in one round trip; the next head waits from ARGV[3] in the heads index (KEYS[5], line id
// ARGV[4]), and an emptied line leaves it. Fenced by the lease and the head's id: a worker whose
// lease expired (another took the line) can never remove what it no longer owns ({0}).
const ADVANCE_LUA = `${HEAD_OF}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local ids = redis.call('ZRANGE', KEYS[2], 0, 0)
if ids[1] ~= ARGV[2] then return {0} end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local following = headOf(KEYS[2], KEYS[3], KEYS[4])
if following then
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[4])
  return {1, following[1], following[2]}
end
redis.call('ZREM', KEYS[5], ARGV[4])
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

// Fenced by the lease: the ready entry (ARGV[3], the line id) at ARGV[2] (empty: removed when the
// line is empty, else due now), then the lease deleted. A head held for its webhook's pause
// (ARGV[4] = 'paused') leaves the heads index (KEYS[4]); an empty line left it when it emptied.
const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
elseif redis.call('ZCARD', KEYS[3]) == 0 then redis.call('ZREM', KEYS[2], ARGV[3])
else redis.call('ZADD', KEYS[2], 0, ARGV[3]) end
if ARGV[4] == 'paused' then redis.call('ZREM', KEYS[4], ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1`;

// Removes deliveries ARGV[3…] from a line (an erasure; KEYS: the ready set, the heads index, the
// line's sequence, sorted set and jobs; ARGV[1] the time, ARGV[2] the line id), whoever drives it.
// A line left empty goes whole (sequence, ready entry, heads entry), as when its last delivery is
// delivered; a line whose head went has its next head due now, waiting from now (not at the time
// the removed head was to be retried). A driver that was on a removed head finds it gone when it
// tries to remove it and leaves the line to its lease's end. Replies how many were removed.
const REMOVE_LUA = `
local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
local removed = 0
for i = 3, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[4], ARGV[i])
  redis.call('HDEL', KEYS[5], ARGV[i])
end
local after = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if not after then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[2])
elseif after ~= head then
  redis.call('ZADD', KEYS[1], 'XX', 'LT', ARGV[1], ARGV[2])
  redis.call('ZADD', KEYS[2], 'XX', ARGV[1], ARGV[2])
end
return removed`;

// Removes the heads-index entry ARGV[1] (KEYS[1]) while its score is still ARGV[2] and its line's
// sorted set (KEYS[2]) does not exist: an entry its line outlived (written by a version that kept
// the index and then removed by one that did not). Fenced so that an append that started the line
// again meanwhile keeps its entry.
const CLEAR_STALE_HEAD_LUA = `
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])`;

// Over the lines of a webhook (KEYS: each line's sorted set, then its jobs): the deliveries waiting
// in all, and when the oldest head was accepted (false: no head).
const SUMMARY_LUA = `
local n, oldest = 0, false
for k = 1, #KEYS, 2 do
  local count = redis.call('ZCARD', KEYS[k])
  if count > 0 then
    n = n + count
    local job = redis.call('HGET', KEYS[k + 1], redis.call('ZRANGE', KEYS[k], 0, 0)[1])
    local at = job and cjson.decode(job).acceptedAtMs
    if type(at) == 'number' and (not oldest or at < oldest) then oldest = at end
  end
end
return {n, oldest}`;

type HeadKeys = [line: string, jobs: string, seq: string, heads: string];
type FencedKeys = [lease: string, line: string, jobs: string, seq: string, heads: string];
type LeaseKeys = [lease: string, ready: string];

/** The FIFO lines in Redis; `partitionOf` maps a webhook to its queue partition (jobs.ts). */
export class RedisFifoLines implements FifoLineStore {
  /** KEYS: the ready set, the heads index, then each line's sequence, sorted set and jobs; see APPEND_LUA. */
  private readonly appendScript: ScriptCall<string[], (string | number)[], number>;
  private readonly headScript: ScriptCall<HeadKeys, [nowMs: number, lineId: string], [string, string] | null>;
  private readonly advanceScript: ScriptCall<
    FencedKeys,
    [token: string, deliveryId: string, nowMs: number, lineId: string],
    [number, string?, string?]
  >;
  private readonly leaseScript: ScriptCall<
    LeaseKeys,
    [token: string, leaseMs: number, hiddenUntilMs: number, mode: 'claim' | 'renew', lineId: string],
    number
  >;
  private readonly releaseScript: ScriptCall<
    [lease: string, ready: string, line: string, heads: string],
    [token: string, atMs: number | '', lineId: string, paused: 'paused' | ''],
    number
  >;
  /** ARGV after the time and the line id: the delivery ids to remove. */
  private readonly removeScript: ScriptCall<
    [ready: string, heads: string, seq: string, line: string, jobs: string],
    [nowMs: number, lineId: string, ...deliveryIds: string[]],
    number
  >;
  private readonly clearStaleHeadScript: ScriptCall<
    [heads: string, line: string],
    [lineId: string, since: string],
    number
  >;
  /** KEYS: each line's sorted set, then its jobs. */
  private readonly summaryScript: ScriptCall<string[], [], [number, number | null]>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'fifo' | 'webhooks'>,
    /** The queue partition of a webhook (jobs.ts partitionOf): its lines live under its hash tag. */
    private readonly partitionOf: (webhookId: string) => number,
    private readonly partitions: number,
  ) {
    this.appendScript = defineScript(redis, { name: 'hooklineFifoAppend', keys: 'varying', lua: APPEND_LUA });
    this.headScript = defineScript(redis, { name: 'hooklineFifoHead', keys: 4, lua: HEAD_LUA });
    this.advanceScript = defineScript(redis, { name: 'hooklineFifoAdvance', keys: 5, lua: ADVANCE_LUA });
    this.leaseScript = defineScript(redis, { name: 'hooklineFifoLease', keys: 2, lua: LEASE_LUA });
    this.releaseScript = defineScript(redis, { name: 'hooklineFifoRelease', keys: 4, lua: RELEASE_LUA });
    this.removeScript = defineScript(redis, { name: 'hooklineFifoRemove', keys: 5, lua: REMOVE_LUA });
    this.clearStaleHeadScript = defineScript(redis, {
      name: 'hooklineFifoClearStaleHead',
      keys: 2,
      lua: CLEAR_STALE_HEAD_LUA,
    });
    this.summaryScript = defineScript(redis, { name: 'hooklineFifoSummary', keys: 'varying', lua: SUMMARY_LUA });
  }

  /**
   * Appends deliveries to their lines (a webhook's own, or a bucket of its ordering key), each line
   * in the order given, and marks each line ready: one script per queue partition, however many
   * webhooks and lines the deliveries reach, so a batch costs one round trip.
   */
  async append(entries: readonly LineEntry[], nowMs: number): Promise<void> {
    const byPartition = new Map<number, Map<string, DeliverJob[]>>();
    for (const { job, bucket } of entries) {
      const n = this.partitionOf(job.webhookId);
      let lines = byPartition.get(n);
      if (!lines) {
        lines = new Map<string, DeliverJob[]>();
        byPartition.set(n, lines);
      }
      const lineId = lineIdOf(job.webhookId, bucket);
      const list = lines.get(lineId);
      if (list) list.push(job);
      else lines.set(lineId, [job]);
    }
    const { fifo } = this.keys;
    await Promise.all(
      [...byPartition].map(([n, lines]) => {
        const keys = [fifo.ready(n), fifo.heads(n)];
        const argv: (string | number)[] = [nowMs];
        for (const [lineId, jobs] of lines) {
          keys.push(fifo.seq(n, lineId), fifo.line(n, lineId), fifo.jobs(n, lineId));
          argv.push(lineId, jobs.length, ...jobs.flatMap((job) => [job.deliveryId, JSON.stringify(job)]));
        }
        return this.appendScript(keys, ...argv);
      }),
    );
  }

  /** Each webhook's FIFO ordering, undefined where it is not FIFO (for replays, which come without the matcher's answer). */
  async orderingOf(webhookIds: readonly string[]): Promise<(FifoOrdering | undefined)[]> {
    if (webhookIds.length === 0) return [];
    const { fifo, orderingKeys } = this.keys.webhooks;
    const [found, keys] = await Promise.all([
      this.redis.smismember(fifo, ...webhookIds),
      this.redis.hmget(orderingKeys, ...webhookIds),
    ]);
    return found.map((n, i) => (n === 1 ? { orderingKey: keys[i] ?? undefined } : undefined));
  }

  async due(
    partition: number,
    nowMs: number,
    limit: number,
  ): Promise<{ lineIds: string[]; nextAtMs: number | undefined }> {
    const ready = this.keys.fifo.ready(partition);
    const [lineIds, next] = await Promise.all([
      limit > 0 ? this.redis.zrangebyscore(ready, '-inf', nowMs, 'LIMIT', 0, limit) : Promise.resolve([]),
      this.redis.zrangebyscore(ready, `(${nowMs}`, '+inf', 'WITHSCORES', 'LIMIT', 0, 1),
    ]);
    return { lineIds, nextAtMs: next[1] === undefined ? undefined : Number(next[1]) };
  }

  async claim(lineId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    return (await this.leaseScript(this.leaseKeys(lineId), token, leaseMs, nowMs + leaseMs, 'claim', lineId)) === 1;
  }

  async renew(lineId: string, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    return (await this.leaseScript(this.leaseKeys(lineId), token, leaseMs, nowMs + leaseMs, 'renew', lineId)) === 1;
  }

  async head(lineId: string, nowMs: number): Promise<LineHead | undefined> {
    const { fifo } = this.keys;
    const n = this.partitionOfLine(lineId);
    const found = await this.headScript(
      [fifo.line(n, lineId), fifo.jobs(n, lineId), fifo.seq(n, lineId), fifo.heads(n)],
      nowMs,
      lineId,
    );
    return found === null ? undefined : { job: deliverySchema.parse(JSON.parse(found[1])) };
  }

  async advance(
    lineId: string,
    token: string,
    deliveryId: string,
    nowMs: number,
  ): Promise<{ removed: false } | { removed: true; next: LineHead | undefined }> {
    const { fifo } = this.keys;
    const n = this.partitionOfLine(lineId);
    const [removed, , job] = await this.advanceScript(
      [fifo.lease(n, lineId), fifo.line(n, lineId), fifo.jobs(n, lineId), fifo.seq(n, lineId), fifo.heads(n)],
      token,
      deliveryId,
      nowMs,
      lineId,
    );
    if (removed !== 1) return { removed: false };
    return { removed: true, next: job === undefined ? undefined : { job: deliverySchema.parse(JSON.parse(job)) } };
  }

  async release(lineId: string, token: string, atMs: number | undefined, paused = false): Promise<void> {
    const { fifo } = this.keys;
    const n = this.partitionOfLine(lineId);
    await this.releaseScript(
      [fifo.lease(n, lineId), fifo.ready(n), fifo.line(n, lineId), fifo.heads(n)],
      token,
      atMs ?? '',
      lineId,
      paused ? 'paused' : '',
    );
  }

  /**
   * Removes deliveries from a line, whoever drives it (an erasure), and answers how many were in
   * it; see REMOVE_LUA for what becomes of the line and its head.
   */
  async remove(lineId: string, deliveryIds: readonly string[], nowMs: number): Promise<number> {
    if (deliveryIds.length === 0) return 0;
    const { fifo } = this.keys;
    const n = this.partitionOfLine(lineId);
    return this.removeScript(
      [fifo.ready(n), fifo.heads(n), fifo.seq(n, lineId), fifo.line(n, lineId), fifo.jobs(n, lineId)],
      nowMs,
      lineId,
      ...deliveryIds,
    );
  }

  /** Deletes every line of a webhook: their keys and their entries in the ready set and the heads index; answers how many keys went. */
  async drop(webhookId: string): Promise<number> {
    const { fifo } = this.keys;
    const n = this.partitionOf(webhookId);
    const lines = linesOf(webhookId);
    // One slot (the partition's tag): one transaction.
    const results = await this.redis
      .multi()
      .del(...lines.flatMap((line) => [fifo.seq(n, line), fifo.line(n, line), fifo.jobs(n, line), fifo.lease(n, line)]))
      .zrem(fifo.ready(n), ...lines)
      .zrem(fifo.heads(n), ...lines)
      .exec();
    return Number(results?.[0]?.[1] ?? 0);
  }

  /**
   * Makes every line of a webhook due at `nowMs` if it waits longer (its head held for a pause). A
   * line being driven shows as due at once; others' claims fail until its turn ends and sets its
   * time. One command: a webhook's lines share its partition's ready set.
   */
  async wake(webhookId: string, nowMs: number): Promise<void> {
    await this.wakeLines(linesOf(webhookId), nowMs);
  }

  /**
   * Makes lines due at `nowMs` if they wait longer (their heads were held back behind an endpoint
   * that takes deliveries again), as `wake` does: one command per queue partition.
   */
  async wakeLines(lineIds: readonly string[], nowMs: number): Promise<void> {
    const byPartition = new Map<number, string[]>();
    for (const lineId of lineIds) {
      const n = this.partitionOfLine(lineId);
      byPartition.set(n, [...(byPartition.get(n) ?? []), lineId]);
    }
    await Promise.all(
      [...byPartition].map(([n, lines]) =>
        this.redis.zadd(this.keys.fifo.ready(n), 'XX', 'LT', ...lines.flatMap((lineId) => [nowMs, lineId])),
      ),
    );
  }

  private partitionOfLine(lineId: string): number {
    return this.partitionOf(webhookOfLine(lineId));
  }

  private leaseKeys(lineId: string): LeaseKeys {
    const n = this.partitionOfLine(lineId);
    return [this.keys.fifo.lease(n, lineId), this.keys.fifo.ready(n)];
  }

  /**
   * The deliveries waiting in a webhook's lines, all of them (those left from before a change of its
   * ordering key or ordering included), and when the oldest head was accepted (the stats endpoint).
   */
  async summary(webhookId: string): Promise<LineSummary> {
    const { fifo } = this.keys;
    const n = this.partitionOf(webhookId);
    const [length, oldest] = await this.summaryScript(
      linesOf(webhookId).flatMap((lineId) => [fifo.line(n, lineId), fifo.jobs(n, lineId)]),
    );
    return { length, headAcceptedAtMs: oldest ?? undefined };
  }

  /** Lines with deliveries waiting, over all partitions and webhooks (a gauge read at scrape time). */
  async linesWaiting(): Promise<number> {
    const counts = await Promise.all(
      Array.from({ length: this.partitions }, (_, n) => this.redis.zcard(this.keys.fifo.ready(n))),
    );
    return counts.reduce((sum, n) => sum + n, 0);
  }

  /**
   * How long the head that has waited longest, over all partitions and webhooks, has been its
   * line's head at `nowMs` (0 when none waits; a gauge read at scrape time). Each partition's
   * oldest entry of the heads index, checked against its line: one ZRANGE and one EXISTS a
   * partition, however many lines wait.
   */
  async oldestHeadAgeMs(nowMs: number): Promise<number> {
    const oldest = await Promise.all(Array.from({ length: this.partitions }, (_, n) => this.oldestHeadSince(n)));
    const sinceMs = Math.min(...oldest.filter((ms) => ms !== undefined));
    // Another process's clock may be ahead of this one's.
    return Number.isFinite(sinceMs) ? Math.max(0, nowMs - sinceMs) : 0;
  }

  /** Since when the oldest head of partition `n` has waited; an entry whose line is gone is cleared on the way. */
  private async oldestHeadSince(n: number): Promise<number | undefined> {
    const { fifo } = this.keys;
    // Bounded: each round clears one stale entry; there are none unless a version without the
    // index emptied lines (a rolling upgrade, or a downgrade and upgrade).
    for (let round = 0; round < 100; round++) {
      const [lineId, since] = await this.redis.zrange(fifo.heads(n), 0, 0, 'WITHSCORES');
      if (lineId === undefined || since === undefined) return undefined;
      const line = fifo.line(n, lineId);
      if ((await this.redis.exists(line)) === 1) return Number(since);
      await this.clearStaleHeadScript([fifo.heads(n), line], lineId, since);
    }
    return undefined;
  }
}
