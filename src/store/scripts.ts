import { createHash } from 'node:crypto';
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
