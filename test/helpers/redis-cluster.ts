import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freeLoopbackPort, startRedisServer, type RedisServerHandle } from '../../src/embedded/redis-server.js';
import { settles } from './wait.js';

/** A local Redis Cluster of `redis-server` processes on loopback ports (tests and benchmarks). */
export interface RedisClusterHandle {
  /** `redis+cluster://127.0.0.1:<port>,…`: the REDIS_URL naming this cluster. */
  readonly url: string;
  /** The masters' client ports. */
  readonly ports: readonly number[];
  /** Stops every node (bounded: each is killed if it has not exited within 10 s). */
  stop(): Promise<void>;
}

export interface StartRedisClusterOptions {
  serverBinary: string;
  /** `redis-cli`, which creates the cluster (`--cluster create`). */
  cliBinary: string;
  /** Working folder: one sub-folder per node, and the nodes' cluster config files. */
  dir: string;
  /** Masters, without replicas; default 3 (the fewest `redis-cli --cluster create` accepts). */
  masters?: number;
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

/** Resolves once every node reports `cluster_state:ok`, all slots assigned and every master known. */
async function waitForClusterOk(ports: readonly number[], deadline: number): Promise<void> {
  const probes = ports.map((port) => {
    const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    return probe;
  });
  let last = 'no answer yet';
  try {
    const ok = await settles(
      async () => {
        const infos = await Promise.all(probes.map((probe) => probe.cluster('INFO').then(String, (error: Error) => `error: ${error.message}`)));
        const notReady = infos.findIndex((info) => {
          const fields = clusterInfoFields(info);
          return (
            fields.get('cluster_state') !== 'ok' ||
            fields.get('cluster_slots_assigned') !== '16384' ||
            fields.get('cluster_known_nodes') !== String(ports.length)
          );
        });
        if (notReady === -1) return true;
        last = `node 127.0.0.1:${ports[notReady]} says ${infos[notReady]!.replace(/\r?\n/g, ' ').slice(0, 300)}`;
        return false;
      },
      Math.max(0, deadline - Date.now()),
    );
    if (!ok) throw new Error(`the Redis Cluster did not reach cluster_state:ok in time; ${last}`);
  } finally {
    for (const probe of probes) probe.disconnect();
  }
}

/**
 * Starts a Redis Cluster of `masters` masters (no replicas) bound to 127.0.0.1: one `redis-server`
 * per master with `cluster-enabled yes` and no persistence, joined and given all 16384 slots by
 * `redis-cli --cluster create`; resolves once every node agrees the cluster is ok. On any failure
 * the nodes already started are stopped again.
 */
export async function startRedisCluster(options: StartRedisClusterOptions): Promise<RedisClusterHandle> {
  const masters = options.masters ?? 3;
  if (!Number.isInteger(masters) || masters < 3) throw new RangeError(`a Redis Cluster needs at least 3 masters, got ${masters}`);
  const deadline = Date.now() + (options.startTimeoutMs ?? 30_000);
  mkdirSync(options.dir, { recursive: true });
  const nodes: RedisServerHandle[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.stop()));
  };
  try {
    for (let i = 0; i < masters; i += 1) nodes.push(await startNode(options, deadline));
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    try {
      await execFileAsync(options.cliBinary, ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], {
        timeout: Math.max(1_000, deadline - Date.now()),
        killSignal: 'SIGKILL',
      });
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(`redis-cli --cluster create failed: ${(error as Error).message}\n${String(stdout).slice(-2_000)}${String(stderr).slice(-2_000)}`);
    }
    await waitForClusterOk(
      nodes.map((node) => node.port),
      deadline,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  const ports = nodes.map((node) => node.port);
  return { url: `redis+cluster://${ports.map((port) => `127.0.0.1:${port}`).join(',')}`, ports, stop };
}
