import { Redis, type RedisOptions } from 'ioredis';

export type { Redis } from 'ioredis';

export interface RedisConnectOptions {
  /** Shown in CLIENT LIST, so operators can tell Hookline's connections apart. */
  connectionName: string;
  /**
   * `null` for blocking consumers (BullMQ workers) that must wait out an outage;
   * a small number for request paths that should fail fast and answer 503.
   */
  maxRetriesPerRequest: number | null;
  /** Batch concurrent commands into pipelines (default on; off for BullMQ's own connections). */
  autoPipelining?: boolean;
}

/** Opens an ioredis connection with Hookline's defaults (auto-pipelining, bounded reconnect back-off). */
export function connectRedis(url: string, options: RedisConnectOptions): Redis {
  const redisOptions: RedisOptions = {
    connectionName: options.connectionName,
    maxRetriesPerRequest: options.maxRetriesPerRequest,
    enableAutoPipelining: options.autoPipelining ?? true,
    retryStrategy: (attempt) => Math.min(attempt * 200, 5_000),
  };
  return new Redis(url, redisOptions);
}

/** Resolves true when Redis answers PING within `timeoutMs`. */
export async function pingRedis(redis: Redis, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([redis.ping().then((reply) => reply === 'PONG', () => false), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
