import type { Redis } from './redis.js';

/** One argument of a script call, as ioredis sends it. */
export type ScriptArg = string | number;

/** A Lua script the stores run as a command of the connection (ioredis sends its text once per socket, then its SHA). */
export interface LuaScript<Keys extends readonly string[]> {
  /** Its command name on the connection: one name, one script. */
  name: string;
  /**
   * How many KEYS it takes; the rest of a call is ARGV. Every key of one call shares one hash tag,
   * so the script touches one Redis Cluster slot.
   */
  keys: Keys['length'];
  lua: string;
}

/** Runs the script with these KEYS, then the rest as ARGV; resolves to its reply as ioredis decodes it. */
export type ScriptCall<Keys extends readonly string[], Argv extends readonly ScriptArg[], Reply> = (
  keys: Keys,
  ...argv: Argv
) => Promise<Reply>;

/** What each connection has registered through defineScript: name → the script's text and key count. */
const registered = new WeakMap<Redis, Map<string, { lua: string; keys: number }>>();

/**
 * Registers `script` on `redis`, once per connection (a connection may serve several stores, and
 * tests build many stores on one), and returns a typed call. The type parameters state what the
 * Lua takes and returns; the reply is not checked at run time. Throws when a different script is
 * already registered under the same name on this connection.
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
  if (!known) {
    redis.defineCommand(script.name, { numberOfKeys: script.keys, lua: script.lua });
    scripts.set(script.name, { lua: script.lua, keys: script.keys });
  } else if (known.lua !== script.lua || known.keys !== script.keys) {
    throw new Error(`another script is already registered as ${script.name} on this connection`);
  }
  const commands = redis as unknown as Record<string, (...args: ScriptArg[]) => Promise<Reply>>;
  return (keys, ...argv) => commands[script.name]!(...keys, ...argv);
}
