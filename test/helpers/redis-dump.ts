import type { Redis } from '../../src/store/redis.js';

/**
 * Every value under the keys matching `pattern` (strings, hashes, lists, sets, sorted sets,
 * streams), as one text: what tests scan for a secret or a payload that must not be stored.
 */
export async function storedText(redis: Redis, pattern: string): Promise<string> {
  const parts: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
    cursor = next;
    for (const key of keys) {
      const type = await redis.type(key);
      if (type === 'string') parts.push((await redis.get(key)) ?? '');
      else if (type === 'hash') parts.push(JSON.stringify(await redis.hgetall(key)));
      else if (type === 'list') parts.push(JSON.stringify(await redis.lrange(key, 0, -1)));
      else if (type === 'set') parts.push(JSON.stringify(await redis.smembers(key)));
      else if (type === 'zset') parts.push(JSON.stringify(await redis.zrange(key, 0, -1)));
      else if (type === 'stream') parts.push(JSON.stringify(await redis.xrange(key, '-', '+')));
    }
  } while (cursor !== '0');
  return parts.join('\n');
}
