import { hash } from 'node:crypto';
import type { Redis } from './redis.js';
import { slotGroups, spreadTags } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

/** Which event ids ingest has fully ingested lately: its idempotency window. */
export interface EventDedupe {
  /** For each id, whether it was marked within the window before `nowMs`. */
  seen(eventIds: readonly string[], nowMs: number): Promise<boolean[]>;
  /** Marks the ids as ingested at `nowMs`; they are seen for at least the window from then. */
  mark(eventIds: readonly string[], nowMs: number): Promise<void>;
}

/**
 * Partitions of the marks, by the first bits of each id's digest. Fixed: another count would look
 * for marks in other places. Their hash tags are spread over the slot range (spreadTags), so a
 * cluster's masters share the marks evenly.
 */
const PARTITIONS = 16;
/** A window is this many time buckets; an id is looked for in the buckets the window touches (this many + 1). */
const BUCKETS_PER_WINDOW = 2;
/**
 * Marks aimed at per set. Redis keeps a set of integers of up to `set-max-intset-entries` (512 by
 * default) as a packed array of 8-byte integers: about 8 bytes per mark, against about 60 in a
 * hash table. A fuller set than this tips over to a hash table; the marks stay correct, they only
 * cost more.
 */
const SET_TARGET_DEFAULT = 400;
/** Ids per script call at most: bounds a call's arguments and the time Redis spends in it. */
const IDS_PER_CALL_MAX = 2_000;
/** Extra life of a bucket's marks beyond the window, for clocks of ingest processes that disagree. */
const CLOCK_SLACK_MS = 60_000;

/**
 * One id's place in the marks: its partition, a 24-bit number that picks the set within a
 * generation, and a 64-bit member (a decimal integer, so Redis packs it). Partition, set and member
 * come from different bits of one SHA-256 digest, so two ids collide only when all of them match.
 */
interface MarkPlace {
  partition: number;
  setHash: number;
  member: string;
}

function placeOf(eventId: string): MarkPlace {
  const digest = hash('sha256', eventId, 'buffer');
  return {
    partition: digest[0]! % PARTITIONS,
    setHash: digest.readUIntBE(1, 3),
    member: digest.readBigInt64BE(4).toString(),
  };
}

// A bucket's layout, as the scripts (lua/event-dedupe-seen.lua and -mark.lua) keep it, lives in its
// partition's meta hash: `s<b>` the set count of its first generation (a power of two), `g<b>` its
// newest generation (each has twice the sets of the one before), `n<b>` its marks. Set keys are
// `<prefix>:<bucket>:<generation>:<set hash mod set count>`.

export interface EventDedupeOptions {
  /** How long a marked id is seen (the dedupe window). */
  windowMs: number;
  /** Marks aimed at per set (tests make it small to exercise many generations). */
  setTarget?: number;
}

/**
 * The marks of ingested event ids, compact and partitioned. Time is cut into buckets of half the
 * window; a mark goes into the bucket of its time, a lookup checks the three buckets the window
 * touches, and a bucket's sets expire together once the window has passed its end (so a mark is
 * kept between one window and one and a half). Within a bucket, marks are 64-bit integers in small
 * sets (packed by Redis, about 8 bytes each), sized by generations as the rate requires.
 *
 * Two distinct ids are taken for one only when their digests agree on the partition, on the set's
 * bits and on all 64 bits of the member, and the other is in a set the lookup checks: at most
 * (buckets checked × generations × marks per set) / 2^64 per lookup, about 1 in 10^15 at the default
 * sizes, whatever the rate (see docs/scaling.md, "Dedupe marks").
 *
 * Each call is one script per partition on a cluster (each partition is its own slot, with its tag
 * spread over the slots) and one script in all on a single server.
 */
export class RedisEventDedupe implements EventDedupe {
  private readonly tags: string[];
  private readonly bucketMs: number;
  private readonly setTarget: number;
  private readonly seenScript: ScriptCall<[routing: string], ScriptArg[], number[]>;
  private readonly markScript: ScriptCall<[routing: string], ScriptArg[], number>;

  constructor(
    private readonly redis: Redis,
    prefix: string,
    private readonly options: EventDedupeOptions,
  ) {
    if (!Number.isSafeInteger(options.windowMs) || options.windowMs < BUCKETS_PER_WINDOW)
      throw new RangeError(`windowMs must be a positive integer, got ${options.windowMs}`);
    this.tags = spreadTags(prefix, 'dd', PARTITIONS);
    this.bucketMs = Math.ceil(options.windowMs / BUCKETS_PER_WINDOW);
    this.setTarget = options.setTarget ?? SET_TARGET_DEFAULT;
    this.seenScript = defineScriptFile(redis, 'event-dedupe-seen', 1);
    this.markScript = defineScriptFile(redis, 'event-dedupe-mark', 1);
  }

  async seen(eventIds: readonly string[], nowMs: number): Promise<boolean[]> {
    const found = new Array<boolean>(eventIds.length).fill(false);
    const bucket = Math.floor(nowMs / this.bucketMs);
    await Promise.all(
      this.calls(eventIds).map(async ({ keys, argv, order }) => {
        const reply = await this.seenScript(keys, bucket, BUCKETS_PER_WINDOW, ...argv);
        order.forEach((index, i) => (found[index] = reply[i] === 1));
      }),
    );
    return found;
  }

  async mark(eventIds: readonly string[], nowMs: number): Promise<void> {
    const bucket = Math.floor(nowMs / this.bucketMs);
    // Relative TTLs, so that expiry does not depend on this process's clock agreeing with Redis's.
    const ttlMs = (bucket + 1) * this.bucketMs + this.options.windowMs + CLOCK_SLACK_MS - nowMs;
    const metaTtlMs = this.options.windowMs + 2 * this.bucketMs + CLOCK_SLACK_MS;
    await Promise.all(
      this.calls(eventIds).map(({ keys, argv }) =>
        this.markScript(keys, bucket, ttlMs, this.setTarget, metaTtlMs, BUCKETS_PER_WINDOW, ...argv),
      ),
    );
  }

  /**
   * The ids by partition, as script calls: one per slot group (and per IDS_PER_CALL_MAX ids), each
   * with its routing key and arguments, and the input index of each id in reply order.
   */
  private calls(eventIds: readonly string[]): { keys: [routing: string]; argv: ScriptArg[]; order: number[] }[] {
    const calls: { keys: [routing: string]; argv: ScriptArg[]; order: number[] }[] = [];
    for (let start = 0; start < eventIds.length; start += IDS_PER_CALL_MAX) {
      const byPartition = new Map<number, { index: number; place: MarkPlace }[]>();
      const end = Math.min(eventIds.length, start + IDS_PER_CALL_MAX);
      for (let index = start; index < end; index += 1) {
        const place = placeOf(eventIds[index]!);
        const list = byPartition.get(place.partition);
        if (list) list.push({ index, place });
        else byPartition.set(place.partition, [{ index, place }]);
      }
      for (const partitions of slotGroups(this.redis, [...byPartition.keys()], (partition) => this.tags[partition]!)) {
        const argv: ScriptArg[] = [];
        const order: number[] = [];
        for (const partition of partitions) {
          const tag = this.tags[partition]!;
          const ids = byPartition.get(partition)!;
          argv.push(tag, ids.length);
          for (const { index, place } of ids) {
            argv.push(place.setHash, place.member);
            order.push(index);
          }
        }
        calls.push({ keys: [`${this.tags[partitions[0]!]!}:meta`], argv, order });
      }
    }
    return calls;
  }
}
