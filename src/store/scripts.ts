import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Redis } from './redis.js';

/** One argument of a script call, as ioredis sends it. */
export type ScriptArg = string | number;

/** A Lua script the stores run (by its SHA; its text only when the server does not hold it yet). */
export interface LuaScript<Keys extends readonly string[]> {
  /** Its command name on the connection: one name, one script. */
  name: string;
  /**
   * How many KEYS it takes; the rest of a call is ARGV. `varying` (a script typed with `string[]`
   * keys): each call names as many as it needs. Every key of one call shares one hash tag, so the
   * script touches one Redis Cluster slot.
   */
  keys: number extends Keys['length'] ? number | 'varying' : Keys['length'];
  lua: string;
}

/**
 * Where the scripts are: each in its own file, `<store>-<what it does>.lua`, and the functions some
 * of them share in `includes/`. Beside this module both in the sources (src/store/lua/, which tsx and
 * vitest run) and in the build (dist/store/lua/, where `npm run build` copies them).
 */
const LUA_DIR = new URL('lua/', import.meta.url);

/** A line for the loader, not Lua's: the one there is, `--@include <file>.lua`, stands for that file of lua/includes/. */
const DIRECTIVE = /^--@/;
const INCLUDE = /^--@include ([a-z0-9-]+\.lua)$/;

/**
 * The text of the script in `<dir>/<name>.lua`, each `--@include <file>.lua` line replaced by
 * `<dir>/includes/<file>.lua`. Throws, naming the script, on an include that does not exist, an
 * include below the script's first line of code (a reader finds what a script includes at its top),
 * any other `--@` line, and an included file that includes (one level, so the order is plain).
 */
export function readLuaScript(dir: URL, name: string): string {
  const lines = readFileSync(new URL(`${name}.lua`, dir), 'utf8').split('\n');
  let code = false;
  return lines
    .map((line) => {
      if (!DIRECTIVE.test(line)) {
        code ||= line.trim() !== '' && !line.startsWith('--');
        return line;
      }
      const file = INCLUDE.exec(line)?.[1];
      if (file === undefined) throw new Error(`${name}.lua: "${line}" is not --@include <file>.lua`);
      if (code) throw new Error(`${name}.lua: "${line}" comes after code; includes go at the top`);
      let included: string;
      try {
        included = readFileSync(new URL(`includes/${file}`, dir), 'utf8');
      } catch (error) {
        throw new Error(`${name}.lua includes ${file}, which lua/includes/ does not hold`, { cause: error });
      }
      if (included.split('\n').some((l) => DIRECTIVE.test(l)))
        throw new Error(`${name}.lua includes ${file}, which has a --@ line: an included file includes nothing`);
      return included.replace(/\n$/, '');
    })
    .join('\n');
}

/** Each script's text once read: name → text. */
const loaded = new Map<string, string>();

/**
 * The text of `src/store/lua/<name>.lua` with its includes in place (see readLuaScript), read from
 * disk on first use (synchronously: stores define their scripts in their constructors) and cached.
 */
export function luaScript(name: string): string {
  let text = loaded.get(name);
  if (text === undefined) {
    text = readLuaScript(LUA_DIR, name);
    loaded.set(name, text);
  }
  return text;
}

/** Runs the script with these KEYS, then the rest as ARGV; resolves to its reply as ioredis decodes it. */
export type ScriptCall<Keys extends readonly string[], Argv extends readonly ScriptArg[], Reply> = (
  keys: Keys,
  ...argv: Argv
) => Promise<Reply>;

/** What each connection has registered through defineScript: name → the script's text and key count. */
const registered = new WeakMap<Redis, Map<string, { lua: string; keys: number | 'varying' }>>();

/** Redis's answer to EVALSHA of a script its cache does not hold (a restart, SCRIPT FLUSH, a new node). */
const isNoScript = (error: unknown) => error instanceof Error && error.message.startsWith('NOSCRIPT');

/**
 * Registers `script` for `redis` and returns a typed call: EVALSHA, and EVAL once when Redis answers
 * NOSCRIPT (its script cache is the server's, so that is once per script per server start). Not
 * ioredis's defineCommand: every pipeline ioredis builds (one per tick under auto-pipelining) copies
 * each defined command onto itself, which cost more CPU than the script calls. The type parameters
 * state what the Lua takes and returns; the reply is not checked at run time. Throws when a
 * different script is already registered under the same name on this connection.
 */
export function defineScript<Keys extends readonly string[], Argv extends readonly ScriptArg[], Reply>(
  redis: Redis,
  script: LuaScript<Keys>,
): ScriptCall<Keys, Argv, Reply> {
  let scripts = registered.get(redis);
  if (!scripts) {
    scripts = new Map();
    registered.set(redis, scripts);
  }
  const known = scripts.get(script.name);
  if (!known) scripts.set(script.name, { lua: script.lua, keys: script.keys });
  else if (known.lua !== script.lua || known.keys !== script.keys)
    throw new Error(`another script is already registered as ${script.name} on this connection`);
  const sha = createHash('sha1').update(script.lua).digest('hex');
  const { lua } = script;
  return async (keys, ...argv) => {
    const keyCount = script.keys === 'varying' ? keys.length : script.keys;
    try {
      return (await redis.evalsha(sha, keyCount, ...keys, ...argv)) as Reply;
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return (await redis.eval(lua, keyCount, ...keys, ...argv)) as Reply;
    }
  };
}

/**
 * defineScript for a store's script: the text of lua/<file>.lua (see luaScript), registered under
 * its file's name, which is unique among the stores' scripts.
 */
export function defineScriptFile<Keys extends readonly string[], Argv extends readonly ScriptArg[], Reply>(
  redis: Redis,
  file: string,
  keys: LuaScript<Keys>['keys'],
): ScriptCall<Keys, Argv, Reply> {
  return defineScript(redis, { name: file, keys, lua: luaScript(file) });
}
