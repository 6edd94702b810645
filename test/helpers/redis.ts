import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { redisKeys } from '../../src/store/keys.js';

export interface TestRedis {
  redis: Redis;
  url: string;
  /** A key prefix no other test uses. */
  prefix: string;
  /** Deletes every key of this prefix and closes the connection. */
  cleanup(): Promise<void>;
}

/** Deletes every key under `prefix` (SCAN, never KEYS). */
export async function deletePrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', redisKeys(prefix).all, 'COUNT', 1000);
    if (keys.length > 0) await redis.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/** A Redis connection to the suite's real server plus an isolated key prefix. */
export function testRedis(): TestRedis {
  const url = inject('redisUrl');
  const prefix = `t${randomBytes(5).toString('hex')}`;
  const redis = connectRedis(url, { connectionName: `hookline-test-${prefix}`, maxRetriesPerRequest: 3 });
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
