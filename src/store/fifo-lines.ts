import { deliverySchema, type DeliverJob } from '../domain/delivery.js';
import { ORDERING_KEY_BUCKETS } from '../domain/ordering-key.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

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

type HeadKeys = [line: string, jobs: string, seq: string, heads: string];
type FencedKeys = [lease: string, line: string, jobs: string, seq: string, heads: string];
type LeaseKeys = [lease: string, ready: string];

/** The FIFO lines in Redis; `partitionOf` maps a webhook to its queue partition (jobs.ts). */
export class RedisFifoLines implements FifoLineStore {
  /** KEYS: the ready set, the heads index, then each line's sequence, sorted set and jobs; see lua/fifo-lines-append.lua. */
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
    this.appendScript = defineScriptFile(redis, 'fifo-lines-append', 'varying');
    this.headScript = defineScriptFile(redis, 'fifo-lines-head', 4);
    this.advanceScript = defineScriptFile(redis, 'fifo-lines-advance', 5);
    this.leaseScript = defineScriptFile(redis, 'fifo-lines-lease', 2);
    this.releaseScript = defineScriptFile(redis, 'fifo-lines-release', 4);
    this.removeScript = defineScriptFile(redis, 'fifo-lines-remove', 5);
    this.clearStaleHeadScript = defineScriptFile(redis, 'fifo-lines-clear-stale-head', 2);
    this.summaryScript = defineScriptFile(redis, 'fifo-lines-summary', 'varying');
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
   * it; see lua/fifo-lines-remove.lua for what becomes of the line and its head.
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
