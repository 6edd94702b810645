import { Cluster, Redis as RedisServer, ReplyError, type RedisOptions } from 'ioredis';
import { parseRedisUrl } from '../config/redis-url.js';
import { raceTimer } from '../lib/timer-race.js';

/**
 * A Hookline connection: to one Redis server, or to a Redis Cluster. Both have the same command
 * interface; every key Hookline builds carries a hash tag, so each command, script and MULTI
 * touches one cluster slot.
 */
export type Redis = RedisServer | Cluster;

export interface RedisConnectOptions {
  /** Shown in CLIENT LIST, so operators can tell Hookline's connections apart. */
  connectionName: string;
  /**
   * `null` for blocking consumers (BullMQ workers) that must wait out an outage;
   * a small number for request paths that should fail fast and answer 503.
   */
  maxRetriesPerRequest: number | null;
  /** Batch concurrent commands into pipelines (default on; off for BullMQ's own connections, and always off on a cluster). */
  autoPipelining?: boolean;
}

const reconnectDelayMs = (attempt: number) => Math.min(attempt * 200, 5_000);

/**
 * How often a cluster connection reads the slot map again on its own. ioredis otherwise learns of a
 * new topology only from a MOVED reply or a failed connection, and a connection that sends nothing
 * to the moved slots (a reader waiting on one stream, say) would keep a dead or demoted master's
 * map for ever. One CLUSTER SLOTS per interval per connection.
 */
const SLOTS_REFRESH_INTERVAL_MS = 5_000;

/** The parts of an ioredis 5 `Cluster` that its periodic slot refresh keeps to itself. */
interface ClusterRefreshState {
  /** Set by quit() and disconnect() (without reconnect). */
  manuallyClosing: boolean;
  isRefreshing: boolean;
  refreshSlotsCache(callback: () => void): void;
  clearNodesRefreshInterval(): void;
}

/**
 * Makes sure a cluster connection that was closed keeps no timer alive. In ioredis 5 the periodic
 * slot refresh re-arms its timer after `quit()` cleared it in two ways: a connection closed while
 * still connecting turns `ready` after its `end` and starts the timer then; and a refresh running
 * when the connection is closed re-arms it as it ends. The timer then fires every interval for
 * ever, and a CLI command on a cluster never exits (2 runs in 15 here). So once a closed connection
 * ends or turns ready, the timer is cleared (after a running refresh has finished). Connections
 * duplicated from this one (subscribers, BullMQ's) get the same care.
 */
function stopRefreshingWhenEnded(cluster: Cluster): void {
  const state = cluster as unknown as ClusterRefreshState;
  const stop = () => {
    if (!state.manuallyClosing) return;
    if (state.isRefreshing) state.refreshSlotsCache(() => state.clearNodesRefreshInterval());
    else state.clearNodesRefreshInterval();
  };
  cluster.on('end', stop);
  cluster.on('ready', stop);
  const duplicate = cluster.duplicate.bind(cluster);
  cluster.duplicate = (...args: Parameters<Cluster['duplicate']>) => {
    const copy = duplicate(...args);
    stopRefreshingWhenEnded(copy);
    return copy;
  };
}

/**
 * Opens an ioredis connection with Hookline's defaults (auto-pipelining, bounded reconnect back-off):
 * a `Cluster` when `url` is `redis+cluster://…` (or `rediss+cluster://…`), else one server.
 */
export function connectRedis(url: string, options: RedisConnectOptions): Redis {
  const target = parseRedisUrl(url);
  if (!target.ok) throw new Error(`invalid Redis URL: ${target.reason}`);
  if (target.kind === 'cluster') {
    const cluster = new Cluster(target.seeds, {
      // Never on a cluster: ioredis pipelines the commands of several slots that one node serves,
      // and when one of them meets MOVED (a slot moved, a map not yet refreshed) beside commands that
      // succeeded, it cannot resend the pipeline and hands the MOVED to the caller. Sent one by one,
      // each command follows its redirection.
      enableAutoPipelining: false,
      clusterRetryStrategy: reconnectDelayMs,
      slotsRefreshInterval: SLOTS_REFRESH_INTERVAL_MS,
      redisOptions: {
        connectionName: options.connectionName,
        maxRetriesPerRequest: options.maxRetriesPerRequest,
        ...(target.username === undefined ? {} : { username: target.username }),
        ...(target.password === undefined ? {} : { password: target.password }),
        ...(target.tls ? { tls: {} } : {}),
      },
    });
    stopRefreshingWhenEnded(cluster);
    if (options.maxRetriesPerRequest !== null) {
      // A cluster connection holds commands while it reconnects, without the per-request retry limit
      // one server's connection has. Request paths must fail fast (503) instead; but only after the
      // first connect, so that commands issued at start-up wait for it.
      cluster.once('ready', () => {
        cluster.options.enableOfflineQueue = false;
      });
    }
    return cluster;
  }
  const redisOptions: RedisOptions = {
    connectionName: options.connectionName,
    maxRetriesPerRequest: options.maxRetriesPerRequest,
    enableAutoPipelining: options.autoPipelining ?? true,
    retryStrategy: reconnectDelayMs,
  };
  return new RedisServer(url, redisOptions);
}

/** Starts the message of the error a cluster connection gives while it cannot tell which master serves a slot. */
const CLUSTER_RECONFIGURING = 'the Redis Cluster is reconfiguring';

/**
 * The Redis errors that mean "storage cannot take this right now" (unreachable, loading, out of
 * memory under noeviction, a cluster failing over or reconfiguring), as opposed to a bug: the API
 * answers 503, and the process's connection watcher has logged the outage once. While a master
 * fails over, ioredis retries a command on its dead connection until it gives up with "Too many
 * Cluster redirections", refreshes a slot map no node can give yet ("Failed to refresh slots
 * cache"), and a read blocked on a master that turns replica ends with UNBLOCKED.
 */
export function isRedisUnavailable(error: Error): boolean {
  return (
    error.name === 'MaxRetriesPerRequestError' ||
    error.name === 'ClusterAllFailedError' ||
    /Connection is closed|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EPIPE|Stream isn't writeable|enableOfflineQueue|^OOM command not allowed|^LOADING|^CLUSTERDOWN|^TRYAGAIN|^MASTERDOWN|^READONLY|^UNBLOCKED|^Too many Cluster redirections|^None of startup nodes is available/.test(
      error.message,
    ) ||
    error.message.startsWith(CLUSTER_RECONFIGURING)
  );
}

/** The base class of ioredis's errors (Redis's replies, aborted commands, a cluster's failed refresh), not exported by ioredis itself. */
const RedisErrorBase = Object.getPrototypeOf(ReplyError) as new () => Error;

/**
 * Whether an error came from Redis or the way to it (a reply, an outage, a cluster redirecting or
 * reconfiguring) rather than from the code that called it, so that it says nothing about the data
 * of the command that met it.
 */
export function isRedisError(error: Error): boolean {
  return (
    isRedisUnavailable(error) ||
    /^(Cluster is disconnect|Node is disconnected|Command timed out)/.test(error.message) ||
    error instanceof RedisErrorBase
  );
}

/** The connection name `redis` was opened with. */
export function connectionNameOf(redis: Redis): string | undefined {
  return redis instanceof Cluster ? redis.options.redisOptions?.connectionName : redis.options.connectionName;
}

/** A new connection to the same server or cluster, with the same options but these. */
export function duplicateRedis(redis: Redis, override: { connectionName: string; autoPipelining: boolean }): Redis {
  if (redis instanceof Cluster) {
    return redis.duplicate([], {
      // Never on a cluster (see connectRedis).
      enableAutoPipelining: false,
      redisOptions: { ...redis.options.redisOptions, connectionName: override.connectionName },
    });
  }
  return redis.duplicate({ connectionName: override.connectionName, enableAutoPipelining: override.autoPipelining });
}

const SLOTS = 16_384;

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i += 1) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit += 1) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
})();

/**
 * The Redis Cluster hash slot of a key (CRC16/XMODEM mod 16384), hashing only the hash tag — the
 * part between the first `{` and the next `}` — when that part is not empty, as Redis does.
 */
export function keySlot(key: string): number {
  let hashed = key;
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) hashed = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(hashed, 'utf8'))
    crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc % SLOTS;
}

/**
 * Items grouped so that each group's keys share one Redis Cluster slot, for one script call per
 * group: on one server everything is one group (a script may touch any key there); on a cluster,
 * one group per slot of `keyOf(item)`. A group holds at most `max` items (a slot with more gives
 * several groups), which bounds each call's arguments and its time in Redis. Groups keep the items' order.
 */
export function slotGroups<T>(redis: Redis, items: readonly T[], keyOf: (item: T) => string, max = Infinity): T[][] {
  if (items.length === 0) return [];
  let bySlot: T[][];
  if (!(redis instanceof Cluster)) bySlot = [[...items]];
  else {
    const groups = new Map<number, T[]>();
    for (const item of items) {
      const slot = keySlot(keyOf(item));
      const group = groups.get(slot);
      if (group) group.push(item);
      else groups.set(slot, [item]);
    }
    bySlot = [...groups.values()];
  }
  if (max === Infinity) return bySlot;
  return bySlot.flatMap((group) =>
    Array.from({ length: Math.ceil(group.length / max) }, (_, n) => group.slice(n * max, (n + 1) * max)),
  );
}

/**
 * Hash tags for `count` partitions of one area whose slots lie evenly spaced over the slot range:
 * tag n is the first of `{<prefix>:<area><n>.<salt>}` (salt 0, 1, …) whose slot falls in the n-th
 * of `count` equal slices. Masters own contiguous slot ranges, so the partitions spread over them
 * as evenly as their count allows, however many masters there are (plain names land where CRC16
 * puts them, several on one master by chance). Deterministic: every process finds the same tags.
 */
export function spreadTags(prefix: string, area: string, count: number): string[] {
  return Array.from({ length: count }, (_, n) => {
    const low = Math.floor((n * SLOTS) / count);
    const high = Math.floor(((n + 1) * SLOTS) / count);
    for (let salt = 0; ; salt += 1) {
      const tag = `{${prefix}:${area}${n}.${salt}}`;
      const slot = keySlot(tag);
      if (slot >= low && slot < high) return tag;
    }
  });
}

/** Resolves once the cluster connection is ready (its slot map loaded); rejects if it ends first. */
async function clusterReady(cluster: Cluster): Promise<void> {
  if (cluster.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const settle = (error?: Error) => {
      cluster.off('ready', onReady);
      cluster.off('end', onEnd);
      if (error) reject(error);
      else resolve();
    };
    const onReady = () => settle();
    const onEnd = () => settle(new Error('the Redis Cluster connection was closed'));
    cluster.once('ready', onReady);
    cluster.once('end', onEnd);
  });
}

const nodeKeyOf = (node: RedisServer) => `${node.options.host}:${node.options.port}`;

function clusterNode(cluster: Cluster, nodeKey: string | undefined): RedisServer | undefined {
  return cluster.nodes('master').find((n) => nodeKeyOf(n) === nodeKey);
}

/** Reads the cluster's slot map again (one CLUSTER SLOTS); resolves either way, a failure being the map not yet known. */
function refreshSlots(cluster: Cluster): Promise<void> {
  return new Promise((resolve) => cluster.refreshSlotsCache(() => resolve()));
}

/**
 * The connection to the master serving `slot`, after reading the slot map again: asked after a
 * (re)connect or a failure, when the map may name a master that died or was demoted by a failover,
 * and a connection that only ever sends to one slot would not learn of the new one by itself soon
 * enough. Throws a reconfiguring error (an unavailability) while no master is known for the slot.
 */
async function masterForSlot(cluster: Cluster, slot: number): Promise<RedisServer> {
  await refreshSlots(cluster);
  const nodeKey = cluster.slots[slot]?.[0];
  const master = clusterNode(cluster, nodeKey);
  if (!master)
    throw new Error(
      `${CLUSTER_RECONFIGURING}: no connection to a master serving slot ${slot} (the map names ${nodeKey ?? 'none'})`,
    );
  return master;
}

/**
 * Every server keys may live on: the server itself, or each master of a cluster (its own
 * connection to that node, with the slot map read again first, so that a failover since the last
 * read does not leave a demoted or dead master in the list). For commands that work per server,
 * such as SCAN.
 */
export async function masterNodes(redis: Redis): Promise<RedisServer[]> {
  if (!(redis instanceof Cluster)) return [redis];
  await clusterReady(redis);
  await refreshSlots(redis);
  return redis.nodes('master');
}

/** A connection as one server knows it: its CLIENT ID there, and on a cluster that server's `host:port`. */
export interface ServerClient {
  id: number;
  node: string | undefined;
}

/**
 * Which server-side client `redis` sends commands on `key` through: on one server its connection,
 * on a cluster its connection to the master serving the key's slot (with the slot map read again
 * first). Ask before a blocking command on `key`, so unblockClient can end it, and again after any
 * failure of that command.
 */
export async function serverClientFor(redis: Redis, key: string): Promise<ServerClient> {
  if (!(redis instanceof Cluster)) return { id: await redis.client('ID'), node: undefined };
  await clusterReady(redis);
  const node = await masterForSlot(redis, keySlot(key));
  return { id: await node.client('ID'), node: nodeKeyOf(node) };
}

/**
 * Ends the blocking command `client` waits in (CLIENT UNBLOCK), sent through `redis` to the server
 * that client is connected to. If the key's slot moved meanwhile, the old server unblocks nothing.
 */
export async function unblockClient(redis: Redis, client: ServerClient): Promise<void> {
  const server = redis instanceof Cluster ? clusterNode(redis, client.node) : redis;
  if (!server)
    throw new Error(
      `${CLUSTER_RECONFIGURING}: no connection to the Redis Cluster master ${client.node ?? '(unknown)'}`,
    );
  await server.client('UNBLOCK', client.id);
}

/** Resolves true when Redis answers PING within `timeoutMs`. */
export async function pingRedis(redis: Redis, timeoutMs: number): Promise<boolean> {
  return raceTimer(
    redis.ping().then(
      (reply) => reply === 'PONG',
      () => false,
    ),
    timeoutMs,
    false,
  );
}
