import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';
import { doneBelow } from './stream-reads.js';

/**
 * Erasing entries from Redis streams so that Redis lets go of their bytes. XDEL only marks an entry
 * deleted: its bytes stay in the stream's node (a listpack of up to about 100 entries) until every
 * entry of that node is gone, and DUMP, RDB snapshots and replicas carry them all the while. So:
 * - a stream no group reads (the dead-letter streams: capped, read by operators) is compacted under
 *   a lock after its entries are deleted: its live entries are copied, ids and all, into a fresh key
 *   that replaces it;
 * - a stream a consumer group reads (an ingest stream) cannot be replaced without losing the group's
 *   pending list, and is not bounded while no worker reads it: its entries are acknowledged and
 *   deleted (so no consumer is left holding one), and with them every entry the group is done with,
 *   which frees the nodes that held them, unless a node also holds entries not yet ingested: those
 *   keep it until they are ingested and the stream is trimmed past them.
 */

/** Entries read per page when looking through a stream. */
const PAGE = 500;
/** Pages read at most: the streams are capped (dead letters) or trimmed behind their group (ingest). */
const PAGES_MAX = 10_000;
/** How long a compaction's lock lasts unrenewed (each page renews it). */
const LOCK_MS = 30_000;
/** How long a compaction waits for another one of the same stream to end before it gives up. */
const LOCK_WAIT_MS = 60_000;
const LOCK_POLL_MS = 100;

/** A stream entry as read: id and its flat field/value list, as text (bytes that are not UTF-8 replaced). */
export type EntryFields = readonly string[];

/** The ids of the stream's entries whose fields pass `test`, read a page at a time. */
export async function entriesWhere(
  redis: Redis,
  stream: string,
  test: (fields: EntryFields) => boolean,
): Promise<string[]> {
  const found: string[] = [];
  let start = '-';
  for (let pages = 0; pages < PAGES_MAX; pages += 1) {
    const entries = await redis.xrange(stream, start, '+', 'COUNT', PAGE);
    for (const [id, fields] of entries) if (test(fields)) found.push(id);
    if (entries.length < PAGE) break;
    start = `(${entries.at(-1)![0]}`;
  }
  return found;
}

/** What erasing from a group's stream did. */
export interface GroupStreamErasure {
  /** Entries deleted. */
  deleted: number;
  /** Entries left that the group has not finished (unread or pending): their nodes may still hold erased bytes. */
  unfinished: number;
}

/**
 * Erases entries from a stream `group` reads: acknowledges and deletes them in one transaction (a
 * consumer ingesting one now finds it acknowledged, and its own XACK does nothing), then trims
 * every entry the group is done with, exactly, so the nodes that held the erased ones are freed.
 */
export async function eraseFromGroupStream(
  redis: Redis,
  stream: string,
  group: string,
  ids: readonly string[],
): Promise<GroupStreamErasure> {
  let deleted = 0;
  if (ids.length > 0) {
    const results = await redis
      .multi()
      .xack(stream, group, ...ids)
      .xdel(stream, ...ids)
      .exec();
    const failure = results?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
    deleted = Number(results?.[1]?.[1] ?? 0);
  }
  const bound = await doneBelow(redis, stream, group);
  if (bound !== undefined) await redis.xtrim(stream, 'MINID', bound);
  return { deleted, unfinished: await redis.xlen(stream) };
}

/** Erasure from streams no group reads (see the file's comment): delete, then compact under a lock. */
export class StreamCompactor {
  private readonly swapScript: ScriptCall<[stream: string, copy: string, lock: string], [string, string], number>;

  constructor(
    private readonly redis: Redis,
    /** The scratch keys of a stream's compaction, on its slot. */
    private readonly keysOf: (stream: string) => { copy: string; lock: string },
  ) {
    this.swapScript = defineScriptFile(redis, 'stream-erasure-swap', 3);
  }

  /**
   * Deletes the entries and compacts the stream, so no byte of them stays; how many were deleted.
   * Writers that only append (XADD, with MAXLEN trimming at the head) and trims at the head may run
   * meanwhile: the swap takes what they did into account. Deleting is done under the lock too, so
   * another compaction's copy cannot bring an entry back. Throws when another compaction of the
   * stream holds the lock for longer than LOCK_WAIT_MS.
   */
  async erase(stream: string, ids: readonly string[]): Promise<number> {
    if (ids.length === 0) return 0;
    const { copy, lock } = this.keysOf(stream);
    const token = randomBytes(12).toString('hex');
    await this.acquire(stream, lock, token);
    let deleted = 0;
    try {
      deleted = await this.redis.xdel(stream, ...ids);
      await this.redis.del(copy);
      let last = '';
      let start = '-';
      for (let pages = 0; pages < PAGES_MAX; pages += 1) {
        const entries = await this.redis.xrangeBuffer(stream, start, '+', 'COUNT', PAGE);
        if (entries.length > 0) {
          const pipeline = this.redis.pipeline();
          for (const [id, fields] of entries) pipeline.xadd(copy, id.toString(), ...fields);
          pipeline.pexpire(lock, LOCK_MS);
          const failure = (await pipeline.exec())?.find(([error]) => error !== null)?.[0];
          if (failure) throw failure;
          last = entries.at(-1)![0].toString();
          start = `(${last}`;
        }
        if (entries.length < PAGE) break;
      }
      if ((await this.swapScript([stream, copy, lock], token, last)) !== 1)
        throw new Error(`the compaction of ${stream} lost its lock (it took longer than ${LOCK_MS} ms per page)`);
    } catch (error) {
      await this.redis.del(copy).catch(() => undefined);
      await this.release(lock, token);
      throw error;
    }
    return deleted;
  }

  private async acquire(stream: string, lock: string, token: string): Promise<void> {
    // Bounded: LOCK_WAIT_MS in LOCK_POLL_MS steps.
    for (let waitedMs = 0; waitedMs <= LOCK_WAIT_MS; waitedMs += LOCK_POLL_MS) {
      if ((await this.redis.set(lock, token, 'PX', LOCK_MS, 'NX')) === 'OK') return;
      await sleep(LOCK_POLL_MS);
    }
    throw new Error(`another erasure has been compacting ${stream} for over ${LOCK_WAIT_MS / 1000} s`);
  }

  private async release(lock: string, token: string): Promise<void> {
    // Only our own lock: it may have lapsed and been taken by another compaction since.
    if ((await this.redis.get(lock).catch(() => null)) === token) await this.redis.del(lock).catch(() => undefined);
  }
}
