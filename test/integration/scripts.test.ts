import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureRedisServerBinary, startRedisServer, type RedisServerHandle } from '../../src/embedded/redis-server.js';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { defineScript, luaScript, readLuaScript } from '../../src/store/scripts.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';

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

describe("the stores' scripts, one .lua file each (src/store/lua/)", () => {
  const SRC = path.resolve(import.meta.dirname, '../../src');
  const LUA = path.join(SRC, 'store/lua');
  const luaFiles = (dir: string) =>
    readdirSync(dir)
      .filter((name) => name.endsWith('.lua'))
      .sort();
  const scripts = luaFiles(LUA).map((file) => file.replace(/\.lua$/, ''));
  const includes = luaFiles(path.join(LUA, 'includes'));
  const sources = readdirSync(SRC, { recursive: true })
    .map(String)
    .filter((file) => file.endsWith('.ts'))
    .map((file) => ({ file, text: readFileSync(path.join(SRC, file), 'utf8') }));
  let t: TestRedis;

  beforeAll(() => {
    t = testRedis();
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  it('defines every script file in some store, by a name that has a file, and holds no Lua in TypeScript', () => {
    const named = sources.flatMap(({ text }) =>
      [...text.matchAll(/\bdefineScriptFile\(\s*[\w.]+,\s*'([^']+)'/g)].map((m) => m[1]!),
    );
    expect([...new Set(named)].sort()).toEqual(scripts);
    // A name the test could not read (not a literal) would escape the check above.
    const calls = sources.flatMap(({ text }) => [...text.matchAll(/(?<!function )\bdefineScriptFile\(/g)]).length;
    expect(calls).toBe(named.length);
    // Lua in a template string (an ioredis call outside one is TypeScript).
    expect(sources.filter(({ text }) => /`[^`]*redis\.p?call\([^`]*`/.test(text)).map(({ file }) => file)).toEqual([]);
  });

  it('includes every file of includes/ somewhere, each at the top of the script that names it', () => {
    const included = scripts.flatMap((name) =>
      [...readFileSync(path.join(LUA, `${name}.lua`), 'utf8').matchAll(/^--@include (\S+)$/gm)].map((m) => m[1]!),
    );
    expect([...new Set(included)].sort()).toEqual(includes);
    // In place of its line: the script's text holds the included functions, and no include line.
    const text = luaScript('event-log-trim');
    expect(text).toContain(readFileSync(path.join(LUA, 'includes/trim-log.lua'), 'utf8').trimEnd());
    expect(text).not.toContain('--@include');
  });

  it('compiles each script in Redis, under the SHA the stores call it by', async () => {
    for (const name of scripts) {
      const text = luaScript(name);
      const sha = await t.redis.script('LOAD', text).catch((error: unknown) => {
        throw new Error(`${name}.lua: ${String(error)}`);
      });
      expect(sha, name).toBe(createHash('sha1').update(text).digest('hex'));
    }
  });

  it('refuses an include it cannot resolve or a reader would not see at the top, loudly and naming the script', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-lua-'));
    try {
      mkdirSync(path.join(dir, 'includes'));
      const write = (file: string, text: string) => writeFileSync(path.join(dir, file), text);
      write('includes/shared.lua', '-- shared\nlocal function one() return 1 end\n');
      write('includes/nested.lua', '--@include shared.lua\n');
      write('ok.lua', '-- a script\n--@include shared.lua\n\nreturn one()\n');
      write('missing.lua', '--@include absent.lua\nreturn 1\n');
      write('late.lua', 'local x = 1\n--@include shared.lua\nreturn x\n');
      write('typo.lua', '--@inclde shared.lua\nreturn 1\n');
      write('deep.lua', '--@include nested.lua\nreturn 1\n');
      const read = (name: string) => readLuaScript(pathToFileURL(`${dir}/`), name);

      expect(read('ok')).toBe('-- a script\n-- shared\nlocal function one() return 1 end\n\nreturn one()\n');
      expect(() => read('missing')).toThrow('missing.lua includes absent.lua, which lua/includes/ does not hold');
      expect(() => read('late')).toThrow('late.lua: "--@include shared.lua" comes after code');
      expect(() => read('typo')).toThrow('typo.lua: "--@inclde shared.lua" is not --@include <file>.lua');
      expect(() => read('deep')).toThrow('deep.lua includes nested.lua, which has a --@ line');
      expect(() => read('absent')).toThrow(/ENOENT/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
