import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connectRedis, keySlot, masterNodes, type Redis } from '../../src/store/redis.js';
import { redisKeys } from '../../src/store/keys.js';

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
