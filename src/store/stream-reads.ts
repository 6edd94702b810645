import {
  connectionNameOf,
  duplicateRedis,
  serverClientFor,
  unblockClient,
  type Redis,
  type ServerClient,
} from './redis.js';

/**
 * What the consumer-group readers share (the ingest stream's, the first attempts' and the read models'): reading
 * entries with Buffer replies, creating a group, and the replies' shapes.
 */

/**
 * [entry id, flat field/value list]; the fields are null for an entry trimmed or deleted while it
 * was pending. Entries are read with Buffer replies, so their bytes arrive as they were written.
 */
export type StreamEntry = [id: string, fields: Buffer[] | null];

/**
 * ioredis's Buffer-reply variants of the stream reads: present on every connection and cluster at
 * runtime, missing from its types. (Its generic `callBuffer` loses the command name when the
 * connection auto-pipelines.)
 */
interface BufferStreamReads {
  xreadgroupBuffer(...args: (string | number)[]): Promise<unknown>;
  xautoclaimBuffer(...args: (string | number)[]): Promise<unknown>;
}

const bufferReads = (redis: Redis) => redis as unknown as BufferStreamReads;

/** Entries of a Buffer reply, with their ids as text (stream ids are ASCII). */
function toEntries(raw: unknown): StreamEntry[] {
  if (!Array.isArray(raw)) return [];
  return (raw as [Buffer, Buffer[] | null][]).map(([entryId, fields]) => [entryId.toString(), fields]);
}

/**
 * One XREADGROUP of one stream; `'>'` for new entries, `'0'` for the consumer's pending ones. With
 * `blockMs` a read of new entries waits up to that long for some; without it, it takes what is there.
 */
export async function readGroup(
  reader: Redis,
  read: { stream: string; group: string; consumer: string; from: '>' | '0'; count: number; blockMs?: number },
): Promise<StreamEntry[]> {
  const reply = await bufferReads(reader).xreadgroupBuffer(
    'GROUP',
    read.group,
    read.consumer,
    'COUNT',
    read.count,
    ...(read.blockMs === undefined ? [] : ['BLOCK', read.blockMs]),
    'STREAMS',
    read.stream,
    read.from,
  );
  if (!Array.isArray(reply)) return [];
  const stream = reply[0] as [Buffer, unknown] | undefined;
  return toEntries(stream?.[1]);
}

/** XAUTOCLAIM rounds one maintenance pass makes at most, so a long backlog of stale entries is taken a bounded share at a time. */
const CLAIM_ROUNDS_MAX = 10;

/**
 * Takes over what consumers presumed dead left pending (claimStale, round after round until the
 * group has none or CLAIM_ROUNDS_MAX rounds), handing each round's entries to `handle`. Answers how
 * many it took.
 */
export async function claimStaleRounds(
  redis: Redis,
  claim: { stream: string; group: string; consumer: string; minIdleMs: number; count: number },
  handle: (entries: StreamEntry[]) => Promise<void>,
): Promise<number> {
  let cursor = '0-0';
  let taken = 0;
  for (let round = 0; round < CLAIM_ROUNDS_MAX; round += 1) {
    const { next, entries } = await claimStale(redis, { ...claim, cursor });
    if (entries.length > 0) {
      taken += entries.length;
      await handle(entries);
    }
    cursor = next;
    if (cursor === '0-0') break;
  }
  return taken;
}

/**
 * One XAUTOCLAIM: up to `count` entries pending for longer than `minIdleMs` with any consumer of the
 * group become `consumer`'s, from `cursor` on. Answers them and the cursor to go on from ('0-0': done).
 */
export async function claimStale(
  redis: Redis,
  claim: { stream: string; group: string; consumer: string; minIdleMs: number; cursor: string; count: number },
): Promise<{ next: string; entries: StreamEntry[] }> {
  const reply = (await bufferReads(redis).xautoclaimBuffer(
    claim.stream,
    claim.group,
    claim.consumer,
    claim.minIdleMs,
    claim.cursor,
    'COUNT',
    claim.count,
  )) as [Buffer, unknown];
  return { next: reply[0].toString(), entries: toEntries(reply[1]) };
}

/** Creates the group (and the stream) when missing, reading from the start: entries appended before it existed are read too. */
export async function ensureGroup(redis: Redis, stream: string, group: string): Promise<void> {
  try {
    await redis.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
  } catch (error) {
    if (!/BUSYGROUP/.test((error as Error).message)) throw error;
  }
}

/**
 * The id below which every entry of `stream` is done with by `group`: the oldest pending entry, or,
 * when nothing older is pending, the one after the group's last-delivered id (every entry up to that
 * one was delivered and acknowledged). undefined when the group has read nothing. The group is read
 * before its pending list, so an entry delivered between the two reads lies above the bound.
 */
export async function doneBelow(redis: Redis, stream: string, group: string): Promise<string | undefined> {
  const groups = (await redis.xinfo('GROUPS', stream)) as unknown[];
  const ours = groups.map(fieldMap).find((g) => g.get('name') === group);
  const lastDelivered = ours?.get('last-delivered-id');
  if (typeof lastDelivered !== 'string' || lastDelivered === '0-0') return undefined;
  const [pendingCount, oldestPending] = (await redis.xpending(stream, group)) as [number, string | null];
  if (pendingCount > 0 && oldestPending !== null && compareIds(oldestPending, lastDelivered) <= 0) return oldestPending;
  return nextId(lastDelivered);
}

/** Compares two stream ids (`<ms>-<seq>`). */
function compareIds(a: string, b: string): number {
  const [aMs = 0n, aSeq = 0n] = a.split('-').map(BigInt);
  const [bMs = 0n, bSeq = 0n] = b.split('-').map(BigInt);
  return aMs === bMs ? (aSeq === bSeq ? 0 : aSeq < bSeq ? -1 : 1) : aMs < bMs ? -1 : 1;
}

/** The smallest stream id after `id`. */
function nextId(id: string): string {
  const [ms = 0n, seq = 0n] = id.split('-').map(BigInt);
  return seq === 2n ** 64n - 1n ? `${ms + 1n}-0` : `${ms}-${seq + 1n}`;
}

/** A flat [name, value, …] reply (XINFO) as a map. */
function fieldMap(flat: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (Array.isArray(flat)) for (let i = 0; i + 1 < flat.length; i += 2) map.set(String(flat[i]), flat[i + 1]);
  return map;
}

/** The value of field `name` in an entry's flat field list; undefined when absent. */
export function fieldOf(fields: readonly Buffer[], name: string): Buffer | undefined {
  let value: Buffer | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i]?.toString() === name) value = fields[i + 1];
  return value;
}

/**
 * Removes the group's consumers, other than `self`, that hold nothing pending and have been silent
 * for `idleMaxMs` (crashed or stopped processes), at most `max` of them.
 */
export async function pruneIdleConsumers(
  redis: Redis,
  prune: { stream: string; group: string; self: string; idleMaxMs: number; max: number },
): Promise<void> {
  const consumers = ((await redis.xinfo('CONSUMERS', prune.stream, prune.group)) as unknown[]).map(fieldMap);
  const idle = consumers
    .filter(
      (c) => c.get('name') !== prune.self && Number(c.get('pending')) === 0 && Number(c.get('idle')) > prune.idleMaxMs,
    )
    .slice(0, prune.max);
  for (const consumer of idle)
    await redis.xgroup('DELCONSUMER', prune.stream, prune.group, String(consumer.get('name')));
}

/** Removes `consumer` from the group unless it still holds pending entries (a clean stop). */
export async function leaveGroupIfIdle(redis: Redis, stream: string, group: string, consumer: string): Promise<void> {
  const mine = await redis.xpending(stream, group, '-', '+', 1, consumer);
  if (mine.length === 0) await redis.xgroup('DELCONSUMER', stream, group, consumer);
}

/** Doubling back-off from `baseMs` per failure up to `maxMs`, with jitter (half to all of it). */
export function backoffMs(failures: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(0, failures - 1), 20));
  return Math.round(ceiling * (0.5 + random() / 2));
}

/** Beyond the read's block time, how long close() waits for a read it could not unblock. */
const CLOSE_GRACE_MS = 1_000;

/**
 * One consumer's blocking reads of one stream, on a connection of their own (a blocking read would
 * hold up every command queued behind it on a shared one), which close() can end at once: it knows
 * its client id on the server that holds the stream (asked again after every reconnect or failure),
 * so CLIENT UNBLOCK can end a read that waits. Redis applies that atomically: the read either took
 * entries already (the caller then finishes them) or returns none.
 */
export class BlockingStreamReader {
  readonly connection: Redis;
  private client: ServerClient | undefined;

  /** `watch`: told about the connection so its errors are heard and its outages logged (else its errors are ignored). */
  constructor(
    private readonly redis: Redis,
    private readonly stream: string,
    suffix: string,
    watch?: (connection: Redis) => void,
  ) {
    this.connection = duplicateRedis(redis, {
      connectionName: `${connectionNameOf(redis) ?? 'hookline'}-${suffix}`,
      autoPipelining: false,
    });
    if (watch) watch(this.connection);
    else this.connection.on('error', () => undefined);
    // A reconnect (on a cluster: a node connection replaced) means a new client id.
    for (const event of ['ready', '+node', '-node']) this.connection.on(event, () => this.forget());
  }

  /** After a failed read: the stream's master (and this connection's client there) may have changed. */
  forget(): void {
    this.client = undefined;
  }

  /** One XREADGROUP (see readGroup), unless `stopped()` says so once the client id is known: then none. */
  async read(read: Omit<Parameters<typeof readGroup>[1], 'stream'>, stopped: () => boolean): Promise<StreamEntry[]> {
    this.client ??= await serverClientFor(this.connection, this.stream);
    if (stopped()) return [];
    return readGroup(this.connection, { ...read, stream: this.stream });
  }

  /**
   * Ends a read that waits (CLIENT UNBLOCK, not awaited: an unreachable Redis must not hold this
   * up), waits for `loop` (the caller's read loop, told to stop before this), and closes the
   * connection; after `blockMs` and a grace second it is closed regardless (Redis unreachable, or
   * the stream's slot moved during the read): entries that read took stay pending, to be claimed.
   */
  async close(loop: Promise<void>, blockMs: number): Promise<void> {
    const force = setTimeout(() => this.connection.disconnect(), blockMs + CLOSE_GRACE_MS);
    if (this.client !== undefined) void unblockClient(this.redis, this.client).catch(() => undefined);
    try {
      await loop;
    } finally {
      clearTimeout(force);
      this.connection.disconnect();
    }
  }
}
