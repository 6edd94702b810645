import type { Config } from '../config/env.js';
import { redisUrlForLog } from '../config/redis-url.js';
import { resolveRedis, resolveSecretKey, type RedisEndpoint } from '../embedded/defaults.js';
import { createEngine, type EngineConfig, type Stores } from '../engine/index.js';
import { outageWatcher } from '../engine/lifecycle.js';
import { createLogger } from '../logger.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import { CliError, redisFailureReason } from './errors.js';
import { say } from './output.js';

/** How long a command waits for Redis to answer before it says it cannot reach it. */
const REACH_TIMEOUT_MS = 5_000;

export interface SettleOptions {
  /**
   * Whether the command may start the embedded Redis where no engine ever kept data (`start`,
   * `keys create`); a command that reads what an engine wrote says there is no data instead.
   */
  createData: boolean;
  /**
   * Whether the process opens webhook secrets: an engine does; the CLI's commands never do, so they
   * run without HOOKLINE_SECRET_KEY (and ignore it when it is set).
   */
  needsSecretKey: boolean;
}

/** Settles where Redis is (the embedded default when REDIS_URL is unset), then the secret key. */
export async function settle(
  config: Config,
  announce: (line: string) => void,
  options: SettleOptions,
): Promise<{ config: EngineConfig; endpoint: RedisEndpoint }> {
  // Redis first: a command that finds no engine data must not leave a data folder (and a key) behind.
  const endpoint = await resolveRedis(config, announce, { createData: options.createData });
  try {
    const secretKey = options.needsSecretKey ? resolveSecretKey(config) : undefined;
    return { config: { ...config, redisUrl: endpoint.url, secretKey }, endpoint };
  } catch (error) {
    await endpoint.release();
    throw error;
  }
}

/** What a command says when Redis does not answer: one sentence naming it (without credentials) and why. */
function unreachable(url: string, cause: Error): CliError {
  return new CliError(`cannot reach Redis at ${redisUrlForLog(url)} (${redisFailureReason(cause)})`);
}

/**
 * What a command that runs until interrupted (`deliveries tail`) says while Redis goes away and comes
 * back: one line when the first of the connections it watches is lost, one when all are back, and
 * nothing else (no stack trace for each reconnect attempt). Every connection such a command opens
 * must be watched.
 */
export function outageNotices(url: string) {
  const where = redisUrlForLog(url);
  return outageWatcher({
    lost: () => say(`hookline: lost the connection to Redis at ${where}; reconnecting…`),
    restored: () => say(`hookline: reconnected to Redis at ${where}`),
  });
}

/**
 * Resolves once `redis` is ready; rejects with the connection's first error (on a cluster, the
 * last error of a node, which says more than the cluster's own), or after `timeoutMs` when nothing
 * answers at all (a host that drops packets). A command does not retry: it says why.
 */
function reach(redis: Redis, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    let nodeError: Error | undefined;
    const settled = (error?: Error) => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      redis.off('error', onError);
      redis.off('node error', onNodeError);
      if (error) reject(nodeError ?? error);
      else resolve();
    };
    const onReady = () => settled();
    const onError = (error: Error) => settled(error);
    const onNodeError = (error: Error) => (nodeError ??= error);
    const timer = setTimeout(() => settled(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
    redis.on('ready', onReady);
    redis.on('error', onError);
    redis.on('node error', onNodeError);
  });
}

/**
 * Runs `body` with the stores of the engine's `tools` role (and the URL of the Redis they use, which
 * may be the embedded one), then releases them and the embedded
 * Redis if the command started it. By default the command reads what an engine wrote (no data
 * folder is created); `createData` lets it start the embedded Redis on a new data folder. The
 * stores open no webhook secret (webhooks come without them), so no command needs the secret key.
 * An unreachable Redis ends the command with one sentence (`cannot reach Redis at
 * redis://host:6379 (connection refused)`) within seconds.
 */
export async function withStores<T>(
  config: Config,
  body: (stores: Stores, redisUrl: string) => Promise<T>,
  options: { createData?: boolean } = {},
): Promise<T> {
  // Installing redis-server (as root on Debian) is announced on stderr, so stdout stays the result.
  const settled = await settle(config, say, { createData: options.createData ?? false, needsSecretKey: false });
  const url = settled.endpoint.url;
  try {
    const engine = await createEngine(settled.config, {
      role: 'tools',
      logger: createLogger({ level: 'silent', format: 'json', fd: 2 }),
    });
    // The connection's last error says why a command failed better than the command's own error does.
    let lastError: Error | undefined;
    engine.stores.redis.on('error', (error: Error) => (lastError = error));
    try {
      try {
        await reach(engine.stores.redis, REACH_TIMEOUT_MS);
      } catch (error) {
        throw unreachable(url, error as Error);
      }
      return await body(engine.stores, url);
    } catch (error) {
      // Redis went away during the command: say so, rather than ioredis's MaxRetriesPerRequestError.
      if (!(error instanceof CliError) && error instanceof Error && isRedisUnavailable(error))
        throw unreachable(url, lastError ?? error);
      throw error;
    } finally {
      await engine.close(0);
    }
  } finally {
    await settled.endpoint.release();
  }
}
