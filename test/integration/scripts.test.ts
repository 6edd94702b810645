import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureRedisServerBinary, startRedisServer, type RedisServerHandle } from '../../src/embedded/redis-server.js';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { defineScript } from '../../src/store/scripts.js';

const COUNTER = {
  name: 'hooklineTestCount',
  keys: 1,
  lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])",
} as const;

// A server of its own: SCRIPT FLUSH empties a server's script cache for every client.
describe('Lua scripts run by their SHA', () => {
  let server: RedisServerHandle;
  let dir: string;
  let redis: Redis;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-scripts-'));
    server = await startRedisServer({
      binary: await ensureRedisServerBinary(() => undefined),
      port: 0,
      dir,
      appendOnly: false,
    });
    redis = connectRedis(server.url, { connectionName: 'hookline-test-scripts', maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    await redis?.quit();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('loads a script the server does not hold (new, or flushed as on a restart), then calls it by its SHA', async () => {
    const count = defineScript<[string], [number], number>(redis, COUNTER);
    expect(await count(['n'], 2)).toBe(2);
    // The first call left the script in the server's cache: the next one is an EVALSHA that succeeds.
    const evalCalls = async () => Number(/cmdstat_eval:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    const evalsBefore = await evalCalls();
    expect(await count(['n'], 3)).toBe(5);
    expect(await evalCalls()).toBe(evalsBefore);

    await redis.script('FLUSH');
    expect(await count(['n'], 4)).toBe(9);
    expect(await evalCalls()).toBe(evalsBefore + 1);
  });

  it('passes the errors of a script through, and refuses another script under a name taken on the connection', async () => {
    const failing = defineScript<[string], [], never>(redis, {
      name: 'hooklineTestFail',
      keys: 1,
      lua: "return redis.error_reply('ERR refused on purpose')",
    });
    await expect(failing(['k'])).rejects.toThrow(/refused on purpose/);
    expect(() => defineScript(redis, { ...COUNTER, lua: 'return 1' })).toThrow(
      /already registered as hooklineTestCount/,
    );
    // The same script again is the same call.
    expect(() => defineScript(redis, COUNTER)).not.toThrow();
  });

  it('takes as many KEYS as each call names when its key count is varying', async () => {
    const sum = defineScript<string[], [], number>(redis, {
      name: 'hooklineTestSumKeys',
      keys: 'varying',
      lua: "local n = 0 for _, key in ipairs(KEYS) do n = n + redis.call('INCR', key) end return n",
    });
    expect(await sum(['{v}:a'])).toBe(1);
    expect(await sum(['{v}:a', '{v}:b', '{v}:c'])).toBe(2 + 1 + 1);
  });

  it('defines no command on the connection, so the pipelines ioredis builds carry none', () => {
    defineScript(redis, COUNTER);
    expect(Object.keys((redis as unknown as { scriptsSet: object }).scriptsSet)).toEqual([]);
  });
});
