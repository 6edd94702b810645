import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { keySlot, masterNodes, type Redis } from '../src/store/redis.js';
import { luaScript } from '../src/store/scripts.js';

/** `INFO memory` figures in bytes: used_memory and the client buffers inside it. */
export async function redisMemory(redis: Redis): Promise<{ usedBytes: number; clientsBytes: number }> {
  const info = await redis.info('memory');
  const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 'NaN');
  return { usedBytes: field('used_memory'), clientsBytes: field('mem_clients_normal') };
}

/** CPU time Redis has used so far (user + system, all threads), in microseconds. */
export async function redisCpuUs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 'NaN');
  return Math.round((field('used_cpu_user') + field('used_cpu_sys')) * 1e6);
}

/** Commands Redis has processed so far (INFO stats total_commands_processed: a script call and every command it runs). */
export async function redisCommands(redis: Redis): Promise<number> {
  const info = await redis.info('stats');
  return Number(/^total_commands_processed:(\d+)/m.exec(info)?.[1] ?? 'NaN');
}

/**
 * Per command (scripts' inner commands included), the calls Redis has processed so far and the
 * microseconds it spent in them (a script's own time, `evalsha`, includes its inner commands'); and
 * the bytes it has read from clients.
 */
export async function redisCommandStats(
  redis: Redis,
): Promise<{ calls: Map<string, number>; usec: Map<string, number>; inputBytes: number }> {
  const [commandstats, stats] = [await redis.info('commandstats'), await redis.info('stats')];
  const calls = new Map<string, number>();
  const usec = new Map<string, number>();
  for (const match of commandstats.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    calls.set(match[1]!, Number(match[2]));
    usec.set(match[1]!, Number(match[3]));
  }
  return { calls, usec, inputBytes: Number(/^total_net_input_bytes:(\d+)/m.exec(stats)?.[1] ?? 'NaN') };
}

/** Deletes every key matching `pattern` (SCAN, never KEYS; on each master of a cluster, one UNLINK per slot); answers how many. */
export async function deleteKeys(redis: Redis, pattern: string): Promise<number> {
  let deleted = 0;
  for (const node of await masterNodes(redis)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      const bySlot = new Map<number, string[]>();
      for (const key of keys) bySlot.set(keySlot(key), [...(bySlot.get(keySlot(key)) ?? []), key]);
      for (const group of bySlot.values()) deleted += await node.unlink(...group);
      cursor = next;
    } while (cursor !== '0');
  }
  return deleted;
}

/** `MEMORY USAGE key SAMPLES 0` (exact), or 0 when the key is gone. */
export async function keyBytes(redis: Redis, key: string | undefined): Promise<number> {
  if (key === undefined) return 0;
  const bytes = (await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) as number | null;
  return bytes ?? 0;
}

/** MEMORY USAGE summed over every key matching `pattern` (SCAN), and how many keys there were. */
export async function patternBytes(redis: Redis, pattern: string): Promise<{ keys: number; bytes: number }> {
  let cursor = '0';
  let keys = 0;
  let bytes = 0;
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    for (const key of found) {
      keys += 1;
      bytes += await keyBytes(redis, key);
    }
    cursor = next;
  } while (cursor !== '0');
  return { keys, bytes };
}

/** What a key of a prefix holds, by its name (the layout of src/store/keys.ts). */
function categoryOf(key: string): string {
  if (/^\{[^:}]+:dd\d+\./.test(key)) return 'dedupe marks';
  if (/\}:log(:bodies|:status)?$/.test(key)) return 'event log';
  if (/:delivery:/.test(key)) return 'delivery records';
  if (/\}:deliveries$/.test(key)) return 'recent lists';
  if (/\}:dead$/.test(key)) return 'dead-letter sets';
  if (/\}:stats:/.test(key)) return 'endpoint stats';
  if (/\}:failing-since$|\}:circuit$|\}:send-rate$|\}:recent-events$/.test(key)) return 'webhook state';
  if (/^\{[^:}]+:q\d+\}/.test(key)) return 'queues';
  if (/^\{[^:}]+:(agent|task):/.test(key)) return 'read models (agents, tasks)';
  if (/^\{[^:}]+:machines\}/.test(key)) return 'machines';
  if (/^\{[^:}]+:(webhooks|keys)\}/.test(key)) return 'webhooks and keys';
  if (/^\{[^:}]+:ep:/.test(key)) return 'endpoints';
  return 'other';
}

/**
 * Every key of `prefix` by category: count and MEMORY USAGE in bytes (delivery records that are only
 * a status counted apart, as tombstones). SCAN plus pipelined MEMORY USAGE and HLEN, so it takes a
 * few seconds for a few hundred thousand keys.
 */
export async function keyBreakdown(
  redis: Redis,
  prefix: string,
): Promise<Record<string, { keys: number; bytes: number }>> {
  const totals: Record<string, { keys: number; bytes: number }> = {};
  for (const node of await masterNodes(redis)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `{${prefix}:*`, 'COUNT', 1000);
      const pipeline = node.pipeline();
      for (const key of keys) {
        pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
        pipeline.call('HLEN', key);
      }
      const replies = (await pipeline.exec()) ?? [];
      keys.forEach((key, i) => {
        const bytes = Number(replies[2 * i]?.[1] ?? 0);
        const fields = replies[2 * i + 1]?.[0] ? undefined : Number(replies[2 * i + 1]?.[1]);
        let category = categoryOf(key);
        if (category === 'delivery records' && fields === 1) category = 'record tombstones';
        const total = (totals[category] ??= { keys: 0, bytes: 0 });
        total.keys += 1;
        total.bytes += bytes;
      });
      cursor = next;
    } while (cursor !== '0');
  }
  return totals;
}

/** The stores' scripts by SHA1, as the server knows them (name: the file's, without `.lua`). */
function scriptNamesBySha(): Map<string, string> {
  const dir = fileURLToPath(new URL('../src/store/lua/', import.meta.url));
  const names = new Map<string, string>();
  for (const file of readdirSync(dir).filter((name) => name.endsWith('.lua'))) {
    const name = file.slice(0, -'.lua'.length);
    names.set(createHash('sha1').update(luaScript(name)).digest('hex'), name);
  }
  return names;
}

/** A key with its run-specific parts (the bench's prefix, ids, numbers) made generic, to group by. */
function keyShape(key: string): string {
  return key
    .replace(/bench[0-9a-f]{8}/g, '<p>')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>')
    .replace(/\d+/g, 'N');
}

/**
 * Every command Redis runs from here on is logged with its duration (SLOWLOG at a threshold of 0),
 * until `stop`, which answers the calls and Redis's µs per write: per script by its name (its inner
 * commands included) and per other command by its name and key's shape. A bench-only probe: the log
 * holds each call's first arguments, so the server must be the bench's own.
 */
export async function writeCosts(
  redis: Redis,
): Promise<{ stop(): Promise<Map<string, { calls: number; us: number }>> }> {
  const [, threshold] = (await redis.config('GET', 'slowlog-log-slower-than')) as [string, string];
  const [, maxLength] = (await redis.config('GET', 'slowlog-max-len')) as [string, string];
  await redis.config('SET', 'slowlog-max-len', '1000000');
  await redis.slowlog('RESET');
  await redis.config('SET', 'slowlog-log-slower-than', '0');
  const scripts = scriptNamesBySha();
  return {
    async stop() {
      await redis.config('SET', 'slowlog-log-slower-than', threshold);
      const entries = (await redis.slowlog('GET', -1)) as [number, number, number, string[]][];
      await redis.slowlog('RESET');
      await redis.config('SET', 'slowlog-max-len', maxLength);
      const costs = new Map<string, { calls: number; us: number }>();
      for (const [, , us, args] of entries) {
        const command = (args[0] ?? '').toLowerCase();
        if (command === 'slowlog' || command === 'config') continue;
        const what =
          command === 'evalsha'
            ? `script ${scripts.get(args[1] ?? '') ?? (args[1] ?? '').slice(0, 8)}`
            : `${command} ${keyShape(args[1] ?? '')}`;
        const cost = costs.get(what) ?? { calls: 0, us: 0 };
        cost.calls += 1;
        cost.us += us;
        costs.set(what, cost);
      }
      return costs;
    },
  };
}
