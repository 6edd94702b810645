/**
 * How a process starts and stops whatever Redis is doing: listening quietly, retrying what needs
 * Redis until it answers, logging an outage once, and shutdown steps that cannot hang each other.
 */
import type { AdminServer, HealthServer } from '../admin/server.js';
import { redisUrlForLog } from '../config/redis-url.js';
import type { Logger } from '../logger.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import { raceTimer } from '../lib/timer-race.js';

/** How long past the grace period a shutdown may take at most, whatever Redis is doing. */
export const SHUTDOWN_SLACK_MS = 5_000;
/** A shutdown step that needs Redis (closing queues, QUIT) gets at most this long. */
export const SHUTDOWN_STEP_MS = 1_000;

/** Runs shutdown steps so that none can hang the next, and all end before the shutdown deadline. */
export class ShutdownSteps {
  constructor(private readonly endsAtMs: number) {}

  /** Waits for `work` at most SHUTDOWN_STEP_MS (less when the deadline is nearer); what it left undone stays undone. */
  async run(work: Promise<unknown> | undefined): Promise<void> {
    if (work === undefined) return;
    const ms = Math.max(0, Math.min(SHUTDOWN_STEP_MS, this.endsAtMs - Date.now()));
    await raceTimer(
      work.catch(() => undefined),
      ms,
      undefined,
    );
  }

  /**
   * Closes a connection politely (QUIT) when Redis answers, and drops it either way: a QUIT sent
   * during an outage waits in the offline queue while the connection keeps reconnecting, which
   * would keep the process alive.
   */
  async closeConnection(connection: Redis): Promise<void> {
    if (connection.status === 'ready') await this.run(connection.quit());
    connection.disconnect();
  }
}

/** What an outage watcher says: the first connection lost, and every lost connection back. */
export interface OutageReport {
  lost(connection: string, error: Error): void;
  restored(downForMs: number): void;
}

/**
 * Reports a Redis outage once when the first of the watched connections fails and once when every
 * connection that failed is back, however many connections (and reconnect attempts) there are.
 * Every connection must be watched: ioredis prints an error event nobody listens to as a raw stack
 * trace on stderr.
 */
export function outageWatcher(report: OutageReport) {
  const down = new Set<string>();
  let sinceMs = 0;
  return {
    watch(connection: Redis, name: string): void {
      connection.on('error', (error: Error) => {
        if (down.has(name)) return;
        down.add(name);
        if (down.size > 1) return;
        sinceMs = Date.now();
        report.lost(name, error);
      });
      connection.on('ready', () => {
        if (!down.delete(name) || down.size > 0) return;
        report.restored(Date.now() - sinceMs);
      });
    },
  };
}

/** The process's outage log (see outageWatcher): a warning when Redis goes away, a line when it is back. */
export function outageLog(logger: Logger, redisUrl: string) {
  const redis = redisUrlForLog(redisUrl);
  return outageWatcher({
    lost: (connection, error) =>
      logger.warn(
        { event: 'redis.unreachable', redis, connection, err: error.message },
        'Redis connection lost; retrying in the background',
      ),
    restored: (downForMs) => logger.info({ event: 'redis.restored', redis, downForMs }, 'Redis connection restored'),
  });
}

/**
 * Listens without Fastify's line per address (one for each network interface on 0.0.0.0): the
 * process's start-up line names where it listens.
 */
export async function quietListen(server: AdminServer | HealthServer, host: string, port: number): Promise<string> {
  const level = server.log.level;
  server.log.level = 'warn';
  try {
    return await server.listen({ host, port });
  } finally {
    server.log.level = level;
  }
}

/** Runs `start` until it succeeds (Redis may be down at start-up), every 2 s; stops trying once `stopped()`. */
export function startWhenRedisAnswers(
  what: string,
  start: () => Promise<void>,
  logger: Logger,
  stopped: () => boolean,
  attempt = 1,
): void {
  start().catch((error: Error) => {
    if (stopped()) return;
    // An outage is logged by the connection watcher; anything else (an ACL refusing XGROUP, say) here.
    if (attempt === 1 && !isRedisUnavailable(error))
      logger.warn({ err: error.message }, `${what} cannot start yet; retrying every 2 s`);
    setTimeout(() => startWhenRedisAnswers(what, start, logger, stopped, attempt + 1), 2_000).unref();
  });
}
