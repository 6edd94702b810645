import { deliverySchema, type DeliverJob } from '../domain/delivery.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

/**
 * The lines of FIFO webhooks in Redis. Per webhook, under its hash tag (one Redis Cluster slot with
 * its delivery log): a sorted set of delivery ids scored by an accept sequence (INCR), the jobs in
 * a hash beside it, and a lease (a random token with a TTL) held by the one worker driving the line.
 * Per queue partition, under the partition's hash tag: the ready set, FIFO webhook id → when its
 * head is due (or its lease ends). A webhook's line and its ready entry live in two slots, so no
 * command touches both; the order of the writes below is what keeps them consistent.
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
  claim(webhookId: string, partition: number, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** Extends a lease still held with `token` (and its ready entry with it); false when it was lost. */
  renew(webhookId: string, partition: number, token: string, nowMs: number, leaseMs: number): Promise<boolean>;
  /** The line's head, or undefined when the line is empty. */
  head(webhookId: string): Promise<LineHead | undefined>;
  /** Removes the head `deliveryId`, only while `token` holds the lease and it is still the head; false otherwise. */
  removeHead(webhookId: string, token: string, deliveryId: string): Promise<boolean>;
  /** Ends a turn: the webhook is ready again at `atMs` (undefined: its line is empty), and the lease is given back. */
  release(webhookId: string, partition: number, token: string, atMs: number | undefined): Promise<void>;
}

/** What the stats endpoint shows of a line. */
export interface LineSummary {
  length: number;
  /** When the head (the oldest delivery waiting) was accepted; undefined when the line is empty. */
  headAcceptedAtMs: number | undefined;
}

// Appends deliveries (ARGV: id, job JSON, id, job JSON, …) in the order given. A delivery already in
// the line keeps its place (an ingest repeated after a crash appends nothing). Replies how many were new.
const APPEND_LUA = `
local added = 0
for i = 1, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    local seq = redis.call('INCR', KEYS[1])
    redis.call('ZADD', KEYS[2], seq, ARGV[i])
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
    added = added + 1
  end
end
return added`;

// The head's id and job; a head whose job is missing (never written by APPEND_LUA) is dropped.
const HEAD_LUA = `
for _ = 1, 100 do
  local ids = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #ids == 0 then return false end
  local job = redis.call('HGET', KEYS[2], ids[1])
  if job then return {ids[1], job} end
  redis.call('ZREM', KEYS[1], ids[1])
end
return false`;

// Fenced by the lease and the head's id: a worker whose lease expired (another took the line) can
// never remove what it no longer owns.
const REMOVE_HEAD_LUA = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local ids = redis.call('ZRANGE', KEYS[2], 0, 0)
if ids[1] ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1`;

const RENEW_LUA = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`;

const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1`;

const SUMMARY_LUA = `
local n = redis.call('ZCARD', KEYS[1])
if n == 0 then return {0, false} end
local ids = redis.call('ZRANGE', KEYS[1], 0, 0)
return {n, redis.call('HGET', KEYS[2], ids[1])}`;

type LineKeys = [line: string, jobs: string];
type FencedKeys = [lease: string, line: string, jobs: string];

/** The FIFO lines in Redis; `partitionOf` maps a webhook to its queue partition (jobs.ts). */
export class RedisFifoLines implements FifoLineStore {
  private readonly appendScript: ScriptCall<[seq: string, line: string, jobs: string], string[], number>;
  private readonly headScript: ScriptCall<LineKeys, [], [string, string] | null>;
  private readonly removeHeadScript: ScriptCall<FencedKeys, [token: string, deliveryId: string], number>;
  private readonly renewScript: ScriptCall<[lease: string], [token: string, leaseMs: number], number>;
  private readonly releaseScript: ScriptCall<[lease: string], [token: string], number>;
  private readonly summaryScript: ScriptCall<LineKeys, [], [number, string | null]>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'fifo' | 'webhooks'>,
    private readonly partitionOf: (webhookId: string) => number,
    private readonly partitions: number,
  ) {
    this.appendScript = defineScript(redis, { name: 'hooklineFifoAppend', keys: 3, lua: APPEND_LUA });
    this.headScript = defineScript(redis, { name: 'hooklineFifoHead', keys: 2, lua: HEAD_LUA });
    this.removeHeadScript = defineScript(redis, { name: 'hooklineFifoRemoveHead', keys: 3, lua: REMOVE_HEAD_LUA });
    this.renewScript = defineScript(redis, { name: 'hooklineFifoRenew', keys: 1, lua: RENEW_LUA });
    this.releaseScript = defineScript(redis, { name: 'hooklineFifoRelease', keys: 1, lua: RELEASE_LUA });
    this.summaryScript = defineScript(redis, { name: 'hooklineFifoSummary', keys: 2, lua: SUMMARY_LUA });
  }

  /**
   * Appends deliveries to their webhooks' lines in the order given, then marks each webhook ready
   * (unless it is marked already: a head waiting for its retry keeps its time). The line is written
   * first: a crash in between rejects the ingest, whose repeat appends nothing and marks the webhook.
   */
  async append(jobs: readonly DeliverJob[], nowMs: number): Promise<void> {
    const byWebhook = new Map<string, DeliverJob[]>();
    for (const job of jobs) byWebhook.set(job.webhookId, [...(byWebhook.get(job.webhookId) ?? []), job]);
    await Promise.all(
      [...byWebhook].map(async ([webhookId, list]) => {
        const { fifo } = this.keys;
        await this.appendScript(
          [fifo.seq(webhookId), fifo.line(webhookId), fifo.jobs(webhookId)],
          ...list.flatMap((job) => [job.deliveryId, JSON.stringify(job)]),
        );
        await this.redis.zadd(fifo.ready(this.partitionOf(webhookId)), 'NX', nowMs, webhookId);
      }),
    );
  }

  /** Whether each webhook has `ordering: fifo` (for replays, which come without the matcher's answer). */
  async areFifo(webhookIds: readonly string[]): Promise<boolean[]> {
    if (webhookIds.length === 0) return [];
    const found = await this.redis.smismember(this.keys.webhooks.fifo, ...webhookIds);
    return found.map((n) => n === 1);
  }

  async due(partition: number, nowMs: number, limit: number): Promise<{ webhookIds: string[]; nextAtMs: number | undefined }> {
    const ready = this.keys.fifo.ready(partition);
    const [webhookIds, next] = await Promise.all([
      limit > 0 ? this.redis.zrangebyscore(ready, '-inf', nowMs, 'LIMIT', 0, limit) : Promise.resolve([]),
      this.redis.zrangebyscore(ready, `(${nowMs}`, '+inf', 'WITHSCORES', 'LIMIT', 0, 1),
    ]);
    return { webhookIds, nextAtMs: next[1] === undefined ? undefined : Number(next[1]) };
  }

  async claim(webhookId: string, partition: number, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    const taken = await this.redis.set(this.keys.fifo.lease(webhookId), token, 'PX', leaseMs, 'NX');
    if (taken !== 'OK') return false;
    // Others skip the webhook while the lease lasts; if this worker dies, it is due when the lease ends.
    await this.redis.zadd(this.keys.fifo.ready(partition), 'XX', nowMs + leaseMs, webhookId);
    return true;
  }

  async renew(webhookId: string, partition: number, token: string, nowMs: number, leaseMs: number): Promise<boolean> {
    if ((await this.renewScript([this.keys.fifo.lease(webhookId)], token, leaseMs)) !== 1) return false;
    await this.redis.zadd(this.keys.fifo.ready(partition), 'XX', nowMs + leaseMs, webhookId);
    return true;
  }

  async head(webhookId: string): Promise<LineHead | undefined> {
    const found = await this.headScript([this.keys.fifo.line(webhookId), this.keys.fifo.jobs(webhookId)]);
    return found === null ? undefined : { job: deliverySchema.parse(JSON.parse(found[1])) };
  }

  async removeHead(webhookId: string, token: string, deliveryId: string): Promise<boolean> {
    const { fifo } = this.keys;
    return (await this.removeHeadScript([fifo.lease(webhookId), fifo.line(webhookId), fifo.jobs(webhookId)], token, deliveryId)) === 1;
  }

  async release(webhookId: string, partition: number, token: string, atMs: number | undefined): Promise<void> {
    const { fifo } = this.keys;
    const ready = fifo.ready(partition);
    if (atMs !== undefined) await this.redis.zadd(ready, atMs, webhookId);
    else {
      // Removed, then the line looked at again: a delivery appended meanwhile either shows here, or
      // was appended after the removal and marked the webhook ready itself (append writes the line,
      // then the mark). Either way it is not left behind.
      await this.redis.zrem(ready, webhookId);
      if ((await this.redis.zcard(fifo.line(webhookId))) > 0) await this.redis.zadd(ready, 0, webhookId);
    }
    await this.releaseScript([fifo.lease(webhookId)], token);
  }

  /** The length of a webhook's line and when its head was accepted (the stats endpoint). */
  async summary(webhookId: string): Promise<LineSummary> {
    const [length, head] = await this.summaryScript([this.keys.fifo.line(webhookId), this.keys.fifo.jobs(webhookId)]);
    const job = head === null ? undefined : deliverySchema.safeParse(JSON.parse(head));
    return { length, headAcceptedAtMs: job?.success ? job.data.acceptedAtMs : undefined };
  }

  /** FIFO webhooks with deliveries in their line, over all partitions (a gauge read at scrape time). */
  async linesWaiting(): Promise<number> {
    const counts = await Promise.all(Array.from({ length: this.partitions }, (_, n) => this.redis.zcard(this.keys.fifo.ready(n))));
    return counts.reduce((sum, n) => sum + n, 0);
  }
}
