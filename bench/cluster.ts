import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findRedisServerBinary } from '../src/embedded/redis-server.js';
import { connectRedis, type Redis } from '../src/store/redis.js';
import { startRedisCluster } from '../test/helpers/redis-cluster.js';
import { hooklineThroughput, type DeliveryBenchSetup, type HooklineThroughput } from './delivery.js';

export interface ClusterFigures {
  masters: number;
  queuePartitions: number;
  /** Commands each master ran over the run (INFO commandstats, those inside scripts included). */
  commands: number[];
  /** Each master's share of all commands. */
  shares: number[];
  /** The e2e figures of the run (its Redis CPU counts the first master's only). */
  throughput: HooklineThroughput;
}

/** Every command a server has run so far, by name (INFO commandstats `calls`). */
async function commandCalls(node: Redis): Promise<Map<string, number>> {
  const text = await node.info('commandstats');
  const calls = new Map<string, number>();
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
  return calls;
}

const sumOf = (calls: Map<string, number>) => [...calls.values()].reduce((a, b) => a + b, 0);

/**
 * The e2e scenario (one process, as `hookline start` runs) on a local Redis Cluster of three masters
 * (`redis-server` processes with `cluster-enabled yes`, joined by `redis-cli --cluster create`, slots
 * in three contiguous ranges as that command assigns them), with the queue partitions the README
 * recommends for it (twice the masters at least); counts the commands each master runs. Undefined
 * when redis-cli is missing.
 */
export async function hooklineOnCluster(setup: DeliveryBenchSetup, events: number, queuePartitions: number): Promise<ClusterFigures | undefined> {
  const serverBinary = await findRedisServerBinary();
  const cliBinary = await findRedisServerBinary(undefined, undefined, 'redis-cli');
  if (!serverBinary || !cliBinary) return undefined;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'hookline-bench-cluster-'));
  const cluster = await startRedisCluster({ serverBinary, cliBinary, dir });
  const nodes = cluster.ports.map((port) =>
    connectRedis(`redis://127.0.0.1:${port}`, { connectionName: 'hookline-bench-cluster-info', maxRetriesPerRequest: 3 }),
  );
  try {
    const before = await Promise.all(nodes.map(commandCalls));
    const throughput = await hooklineThroughput(
      { ...setup, redisUrl: cluster.url, infoRedis: nodes[0]!, config: { ...setup.config, queuePartitions } },
      events,
    );
    const after = await Promise.all(nodes.map(commandCalls));
    const commands = after.map((calls, i) => sumOf(calls) - sumOf(before[i]!));
    const total = commands.reduce((a, b) => a + b, 0);
    return { masters: nodes.length, queuePartitions, commands, shares: commands.map((n) => n / total), throughput };
  } finally {
    await Promise.all(nodes.map((node) => node.quit()));
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
