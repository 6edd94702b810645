import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findRedisServerBinary } from '../src/embedded/redis-server.js';
import { redisKeys } from '../src/store/keys.js';
import { connectRedis, keySlot, type Redis } from '../src/store/redis.js';
import { startRedisCluster } from '../test/helpers/redis-cluster.js';
import { hooklineThroughput, type DeliveryBenchSetup, type HooklineThroughput } from './delivery.js';
import { redisCpuUs } from './redis-info.js';
import { MixedWorkload } from './workload.js';

export interface ClusterFigures {
  masters: number;
  queuePartitions: number;
  /** Commands each master ran over the measured run (INFO commandstats, those inside scripts included). */
  commands: number[];
  /** Each master's share of all commands. */
  shares: number[];
  /** Each master's share of the CPU time the masters used over the measured run (INFO cpu). */
  cpuShares: number[];
  /** The master (index into `commands`) serving the machine read model's slot, where every machine event is written. */
  listingMaster: number;
  /** The producers' mix of event types, and each vendor's webhooks (one per webhook event type). */
  mix: string;
  webhooksPerVendor: number;
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

/** The index in `ports` of the master serving `slot` (CLUSTER SLOTS: start, end, then the master's host and port). */
async function ownerOf(node: Redis, ports: readonly number[], slot: number): Promise<number> {
  const ranges = await node.cluster('SLOTS');
  const owner = ranges.find(([start, end]) => slot >= start && slot <= end)?.[2]?.[1];
  return ports.findIndex((port) => port === owner);
}

/**
 * The e2e scenario (one process, as `hookline start` runs) on a local Redis Cluster of three masters
 * (`redis-server` processes with `cluster-enabled yes`, joined by `redis-cli --cluster create`, slots
 * in three contiguous ranges as that command assigns them), with the queue partitions the README
 * recommends for it (twice the masters at least), and producers sending the mixed workload (all six
 * webhook event types and TASK_UPDATED; each vendor a webhook per type); counts the commands each
 * master runs over the measured run (not the webhooks' registration or the warm-up). Undefined when
 * redis-cli is missing.
 */
export async function hooklineOnCluster(
  setup: DeliveryBenchSetup,
  events: number,
  queuePartitions: number,
): Promise<ClusterFigures | undefined> {
  const serverBinary = await findRedisServerBinary();
  const cliBinary = await findRedisServerBinary(undefined, undefined, 'redis-cli');
  if (!serverBinary || !cliBinary) return undefined;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'hookline-bench-cluster-'));
  const cluster = await startRedisCluster({ serverBinary, cliBinary, dir });
  const nodes = cluster.ports.map((port) =>
    connectRedis(`redis://127.0.0.1:${port}`, {
      connectionName: 'hookline-bench-cluster-info',
      maxRetriesPerRequest: 3,
    }),
  );
  try {
    const workload = new MixedWorkload();
    let commands: number[] = [];
    let cpuUs: number[] = [];
    const counters = () =>
      Promise.all(
        nodes.map(async (node) => ({ calls: sumOf(await commandCalls(node)), cpuUs: await redisCpuUs(node) })),
      );
    let before: Awaited<ReturnType<typeof counters>> = [];
    const throughput = await hooklineThroughput(
      { ...setup, redisUrl: cluster.url, infoRedis: nodes[0]!, config: { ...setup.config, queuePartitions } },
      events,
      {
        workload,
        probe: {
          started: async () => void (before = await counters()),
          finished: async () => {
            const after = await counters();
            commands = after.map((node, i) => node.calls - before[i]!.calls);
            cpuUs = after.map((node, i) => node.cpuUs - before[i]!.cpuUs);
          },
        },
      },
    );
    const shareOf = (values: number[]) => values.map((n) => n / values.reduce((a, b) => a + b, 0));
    const listingMaster = await ownerOf(nodes[0]!, cluster.ports, keySlot(redisKeys(throughput.prefix).machines.docs));
    return {
      masters: nodes.length,
      queuePartitions,
      commands,
      shares: shareOf(commands),
      cpuShares: shareOf(cpuUs),
      listingMaster,
      mix: MixedWorkload.describe(),
      webhooksPerVendor: workload.eventTypes.length,
      throughput,
    };
  } finally {
    await Promise.all(nodes.map((node) => node.quit()));
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
