import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freeLoopbackPort, startRedisServer, type RedisServerHandle } from '../../src/embedded/redis-server.js';
import { settles } from './wait.js';

/** A local Redis Cluster of `redis-server` processes on loopback ports (tests and benchmarks). */
export interface RedisClusterHandle {
  /** `redis+cluster://127.0.0.1:<port>,…`: the REDIS_URL naming this cluster (every node, replicas included). */
  readonly url: string;
  /** The masters' client ports, as the cluster was created. */
  readonly ports: readonly number[];
  /** The port of the master serving `slot` now, as a live node sees it. */
  masterOf(slot: number): Promise<number>;
  /**
   * `CLUSTER FAILOVER` on a replica of the master at `masterPort`: the replica takes the master's
   * slots over with its agreement. Resolves with the replica's port once every live node sees it
   * as the master of those slots.
   */
  failover(masterPort: number, timeoutMs?: number): Promise<number>;
  /**
   * SIGKILLs the master at `masterPort`, as a crash would; resolves with the port of the replica
   * that was promoted once every live node sees it serving the dead master's slots.
   */
  killMaster(masterPort: number, timeoutMs?: number): Promise<number>;
  /** Stops every node (bounded: each is killed if it has not exited within 10 s). */
  stop(): Promise<void>;
}

export interface StartRedisClusterOptions {
  serverBinary: string;
  /** `redis-cli`, which creates the cluster (`--cluster create`). */
  cliBinary: string;
  /** Working folder: one sub-folder per node, and the nodes' cluster config files. */
  dir: string;
  /** Masters; default 3 (the fewest `redis-cli --cluster create` accepts). */
  masters?: number;
  /** Replicas of each master; default 0. With one or more, failover() and killMaster() can promote one. */
  replicas?: number;
  /** Bound on the whole start-up: processes, slot assignment and agreement; default 30 s. */
  startTimeoutMs?: number;
}

const execFileAsync = promisify(execFile);
const NODE_START_ATTEMPTS = 3;

/** Starts one cluster-enabled node on free loopback ports (client and bus), retrying if a port was taken meanwhile. */
async function startNode(options: StartRedisClusterOptions, deadline: number): Promise<RedisServerHandle> {
  const dir = path.resolve(options.dir);
  let lastError: unknown;
  for (let attempt = 0; attempt < NODE_START_ATTEMPTS; attempt += 1) {
    const port = await freeLoopbackPort();
    let busPort = await freeLoopbackPort();
    if (busPort === port) busPort = await freeLoopbackPort();
    try {
      return await startRedisServer({
        binary: options.serverBinary,
        port,
        dir: path.join(dir, `node-${port}`),
        appendOnly: false,
        startTimeoutMs: Math.max(1_000, deadline - Date.now()),
        extraArgs: [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          path.join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout',
          '2000',
          // An explicit bus port: the default (port + 10000) may be taken, or above 65535.
          '--cluster-port',
          String(busPort),
        ],
      });
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

/** The fields of a CLUSTER INFO reply. */
function clusterInfoFields(text: string): Map<string, string> {
  return new Map(
    text
      .split(/\r?\n/)
      .map((line) => line.split(':'))
      .filter((parts): parts is [string, string] => parts.length === 2)
      .map(([name, value]) => [name, value.trim()]),
  );
}

/** One line of CLUSTER NODES: a node, its role, its master's id (replicas) and whether it is marked failed. */
interface NodeView {
  id: string;
  port: number;
  master: boolean;
  masterId: string | undefined;
  failed: boolean;
}

function parseClusterNodes(text: string): NodeView[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [id = '', address = '', flags = '', masterId = '-'] = line.split(' ');
      const flagList = flags.split(',');
      return {
        id,
        port: Number(/:(\d+)@/.exec(address)?.[1]),
        master: flagList.includes('master'),
        masterId: masterId === '-' ? undefined : masterId,
        failed: flagList.includes('fail'),
      };
    });
}

/** A short-lived connection to one node that never retries, for probes. */
function probeNode(port: number): Redis {
  const probe = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => undefined);
  return probe;
}

/** Runs `use` with a probe of each node, closing them after. */
async function withProbes<T>(ports: readonly number[], use: (probes: Redis[]) => Promise<T>): Promise<T> {
  const probes = ports.map(probeNode);
  try {
    return await use(probes);
  } finally {
    for (const probe of probes) probe.disconnect();
  }
}

/** Resolves once every node reports `cluster_state:ok`, all slots assigned and every master known. */
async function waitForClusterOk(ports: readonly number[], deadline: number, knownNodes = ports.length): Promise<void> {
  let last = 'no answer yet';
  await withProbes(ports, async (probes) => {
    const ok = await settles(
      async () => {
        const infos = await Promise.all(
          probes.map((probe) => probe.cluster('INFO').then(String, (error: Error) => `error: ${error.message}`)),
        );
        const notReady = infos.findIndex((info) => {
          const fields = clusterInfoFields(info);
          return (
            fields.get('cluster_state') !== 'ok' ||
            fields.get('cluster_slots_assigned') !== '16384' ||
            fields.get('cluster_known_nodes') !== String(knownNodes)
          );
        });
        if (notReady === -1) return true;
        last = `node 127.0.0.1:${ports[notReady]} says ${infos[notReady]!.replace(/\r?\n/g, ' ').slice(0, 300)}`;
        return false;
      },
      Math.max(0, deadline - Date.now()),
    );
    if (!ok) throw new Error(`the Redis Cluster did not reach cluster_state:ok in time; ${last}`);
  });
}

/** Resolves once every replica reports its link to its master up, so that it can take over. */
async function waitForReplicasInSync(ports: readonly number[], deadline: number): Promise<void> {
  await withProbes(ports, async (probes) => {
    const synced = await settles(
      async () => {
        const infos = await Promise.all(probes.map((probe) => probe.info('replication').then(String, () => '')));
        return infos.every((info) => /role:master/.test(info) || /master_link_status:up/.test(info));
      },
      Math.max(0, deadline - Date.now()),
    );
    if (!synced) throw new Error('the Redis Cluster replicas did not sync with their masters in time');
  });
}

/**
 * Waits until every node in `ports` sees `port` as a master, none as failed among the living, and
 * reports cluster_state:ok: the cluster has settled after a failover.
 */
async function waitForMaster(ports: readonly number[], port: number, timeoutMs: number): Promise<void> {
  let last = 'no answer yet';
  await withProbes(ports, async (probes) => {
    const settled = await settles(async () => {
      const views = await Promise.all(
        probes.map(async (probe) => ({
          nodes: parseClusterNodes(String(await probe.cluster('NODES'))),
          info: String(await probe.cluster('INFO')),
        })),
      ).catch((error: Error) => {
        last = error.message;
        return undefined;
      });
      if (!views) return false;
      const lagging = views.findIndex(
        ({ nodes, info }) =>
          !nodes.some((node) => node.port === port && node.master && !node.failed) || !/cluster_state:ok/.test(info),
      );
      if (lagging === -1) return true;
      last = `node 127.0.0.1:${ports[lagging]} does not see 127.0.0.1:${port} as a serving master yet`;
      return false;
    }, timeoutMs);
    if (!settled) throw new Error(`the Redis Cluster did not settle after a failover in ${timeoutMs} ms: ${last}`);
  });
}

/**
 * Starts a Redis Cluster of `masters` masters (no replicas) bound to 127.0.0.1: one `redis-server`
 * per master with `cluster-enabled yes` and no persistence, joined and given all 16384 slots by
 * `redis-cli --cluster create`; resolves once every node agrees the cluster is ok. On any failure
 * the nodes already started are stopped again.
 */
export async function startRedisCluster(options: StartRedisClusterOptions): Promise<RedisClusterHandle> {
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 0;
  if (!Number.isInteger(masters) || masters < 3)
    throw new RangeError(`a Redis Cluster needs at least 3 masters, got ${masters}`);
  if (!Number.isInteger(replicas) || replicas < 0)
    throw new RangeError(`replicas must be a whole number ≥ 0, got ${replicas}`);
  const deadline = Date.now() + (options.startTimeoutMs ?? 30_000);
  mkdirSync(options.dir, { recursive: true });
  const nodes: RedisServerHandle[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.stop()));
  };
  try {
    for (let i = 0; i < masters * (1 + replicas); i += 1) nodes.push(await startNode(options, deadline));
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    try {
      await execFileAsync(
        options.cliBinary,
        ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicas), '--cluster-yes'],
        {
          timeout: Math.max(1_000, deadline - Date.now()),
          killSignal: 'SIGKILL',
        },
      );
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(
        `redis-cli --cluster create failed: ${(error as Error).message}\n${String(stdout).slice(-2_000)}${String(stderr).slice(-2_000)}`,
      );
    }
    await waitForClusterOk(
      nodes.map((node) => node.port),
      deadline,
    );
    if (replicas > 0)
      await waitForReplicasInSync(
        nodes.map((node) => node.port),
        deadline,
      );
  } catch (error) {
    await stop();
    throw error;
  }
  const all = nodes.map((node) => node.port);
  const alive = new Set(all);
  /** CLUSTER NODES as a live node sees it. */
  const view = async (): Promise<NodeView[]> => {
    for (const port of alive) {
      const text = await withProbes([port], ([probe]) => probe!.cluster('NODES').then(String, () => undefined));
      if (text !== undefined) return parseClusterNodes(text);
    }
    throw new Error('no node of the Redis Cluster answers');
  };
  const replicaOf = async (masterPort: number): Promise<number> => {
    const nodes = await view();
    const master = nodes.find((node) => node.port === masterPort && node.master);
    const replica = nodes.find(
      (node) => master !== undefined && node.masterId === master.id && !node.failed && alive.has(node.port),
    );
    if (!replica) throw new Error(`127.0.0.1:${masterPort} is not a master with a live replica`);
    return replica.port;
  };
  const masterSet = new Set((await view()).filter((node) => node.master).map((node) => node.port));
  return {
    url: `redis+cluster://${all.map((port) => `127.0.0.1:${port}`).join(',')}`,
    ports: all.filter((port) => masterSet.has(port)),
    async masterOf(slot) {
      const ranges = await withProbes([...alive].slice(0, 1), ([probe]) => probe!.cluster('SLOTS'));
      const owner = ranges.find(([start, end]) => slot >= start && slot <= end)?.[2]?.[1];
      if (owner === undefined) throw new Error(`no master serves slot ${slot}`);
      return owner;
    },
    async failover(masterPort, timeoutMs = 30_000) {
      const replica = await replicaOf(masterPort);
      await withProbes([replica], ([probe]) => probe!.cluster('FAILOVER'));
      await waitForMaster([...alive], replica, timeoutMs);
      return replica;
    },
    async killMaster(masterPort, timeoutMs = 30_000) {
      const replica = await replicaOf(masterPort);
      const node = nodes[all.indexOf(masterPort)];
      if (!node) throw new Error(`127.0.0.1:${masterPort} is not a node of this cluster`);
      await node.kill();
      alive.delete(masterPort);
      await waitForMaster([...alive], replica, timeoutMs);
      return replica;
    },
    stop,
  };
}
