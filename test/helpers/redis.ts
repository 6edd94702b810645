import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import type { Redis as RedisServer } from 'ioredis';
import { connectRedis, keySlot, masterNodes, type Redis } from '../../src/store/redis.js';
import { redisKeys } from '../../src/store/keys.js';
import { waitFor } from './wait.js';

export interface TestRedis {
  redis: Redis;
  url: string;
  /** A key prefix no other test uses. */
  prefix: string;
  /** Deletes every key of this prefix and closes the connection. */
  cleanup(): Promise<void>;
}

/** Deletes every key under `prefix` (SCAN, never KEYS), on each master of a Redis Cluster. */
export async function deletePrefix(redis: Redis, prefix: string): Promise<void> {
  for (const node of await masterNodes(redis)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', redisKeys(prefix).all, 'COUNT', 1000);
      // One UNLINK per hash slot: a cluster node refuses a multi-key command across slots.
      const bySlot = new Map<number, string[]>();
      for (const key of keys) {
        const slot = keySlot(key);
        bySlot.set(slot, [...(bySlot.get(slot) ?? []), key]);
      }
      await Promise.all([...bySlot.values()].map((group) => node.unlink(...group)));
      cursor = next;
    } while (cursor !== '0');
  }
}

/** A Redis connection to the suite's real server (or `url`, e.g. a cluster's) plus an isolated key prefix. */
export function testRedis(url: string = inject('redisUrl'), prefix = `t${randomBytes(5).toString('hex')}`): TestRedis {
  const redis = connectRedis(url, { connectionName: `hookline-test-${prefix}`, maxRetriesPerRequest: 3 });
  // A test that stops Redis on purpose would otherwise print ioredis's unhandled error event on every
  // reconnect attempt; a command that fails still rejects.
  redis.on('error', () => undefined);
  return {
    redis,
    url,
    prefix,
    async cleanup() {
      await deletePrefix(redis, prefix);
      await redis.quit();
    },
  };
}

/**
 * Runs `work` and answers the name of every command that named `needle` (e.g. a key prefix's hash
 * tag) meanwhile, those inside scripts included, as MONITOR saw them on a single server. Other tests
 * share the server but not a test's key prefix, so their commands are not counted.
 */
export async function commandsNaming(redis: Redis, needle: string, work: () => Promise<unknown>): Promise<string[]> {
  const [server, ...others] = await masterNodes(redis);
  if (others.length > 0) throw new Error('commandsNaming watches a single server');
  const { monitor, failures } = await monitorOf(server!);
  const marker = `hookline-test-commands-counted-${randomBytes(5).toString('hex')}`;
  const names: string[] = [];
  let done = false;
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (args.includes(marker)) done = true;
    else if (args.some((arg) => arg.includes(needle))) names.push(args[0]!.toLowerCase());
  });
  try {
    await work();
    // MONITOR reports commands in the order they ran: once the marker is seen, so is all the work.
    await redis.exists(marker);
    await waitFor(() => done, 5_000, 'the marker command on MONITOR');
  } finally {
    monitor.disconnect();
  }
  if (failures.length > 0) throw failures[0]!;
  return names;
}

/**
 * A MONITOR connection to `server`, once it monitors (ioredis's `monitor()`, with the start-up race
 * below taken care of), and the errors it has had since.
 *
 * On a server other clients keep busy (test files running beside this one), the first lines MONITOR
 * sends can arrive in the same read as its OK, before ioredis counts the connection as monitoring:
 * ioredis takes each for the reply to a command it never sent and emits "Command queue state
 * error" (ioredis's `monitor()` rejects on the first). Those lines are commands that ran before
 * MONITOR answered, so before the caller's work began: they are let go. Any other error is a
 * failure, answered in `failures`.
 */
async function monitorOf(server: RedisServer): Promise<{ monitor: RedisServer; failures: Error[] }> {
  const monitor = server.duplicate({ monitor: true, lazyConnect: false });
  const failures: Error[] = [];
  let monitoring = false;
  monitor.on('error', (error: Error) => {
    if (!monitoring && error.message.startsWith('Command queue state error')) return;
    failures.push(error);
  });
  try {
    await new Promise<void>((resolve, reject) => {
      monitor.once('monitoring', () => resolve());
      monitor.once('end', () => reject(failures[0] ?? new Error('the MONITOR connection ended before it monitored')));
    });
  } catch (error) {
    monitor.disconnect();
    throw error;
  }
  monitoring = true;
  return { monitor, failures };
}
