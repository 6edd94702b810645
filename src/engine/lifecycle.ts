/**
 * How a process starts and stops whatever Redis is doing: its parts' lifecycle (each part registers
 * its own start and stop, in a phase), listening quietly, retrying what needs Redis until it
 * answers, logging an outage once, and shutdown steps that cannot hang each other.
 */
import type { AdminServer, HealthServer } from '../admin/server.js';
import { redisUrlForLog } from '../config/redis-url.js';
import type { Logger } from '../logger.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import { raceTimer } from '../lib/timer-race.js';

/** How long past the grace period a shutdown may take at most, whatever Redis is doing. */
export const SHUTDOWN_SLACK_MS = 5_000;
/** A shutdown step that needs Redis (closing queues, QUIT) gets at most this long. */
const SHUTDOWN_STEP_MS = 1_000;

/** Runs shutdown steps so that none can hang the next, and all end before the shutdown deadline. */
class ShutdownSteps {
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

/** Reports the outages of the connections it is told to watch (see outageWatcher). */
export type OutageWatcher = ReturnType<typeof outageWatcher>;

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
function startWhenRedisAnswers(
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

/**
 * The phases of a process, in the order they start; shutdown runs them in the reverse. Within a
 * phase, parts start in the order they were added and stop in the reverse. Phases, not the order of
 * building, say when a part runs: the servers are built after the worker (their scrapes read it),
 * yet take their ports before it starts and answer until it has drained.
 *  - foundation: what everything runs on (trace export, Redis connections, the webhook change feed,
 *    queues, the machine index); stops last.
 *  - serving: the admin API and the health server. A port in use fails start-up before any job is
 *    taken; the health server answers probes and scrapes while the worker drains.
 *  - work: the delivery worker and what it writes to (the endpoint stats buffer, added first, so it
 *    is flushed after the worker's last attempts).
 *  - intake: the read-model projector and the ingest-stream consumers, which stop before the worker
 *    (the projector after the consumers: a batch they ingest while stopping still reaches it).
 */
const PHASES = ['foundation', 'serving', 'work', 'intake'] as const;
type Phase = (typeof PHASES)[number];

/** What a part's start may use. */
interface Starting {
  /** Aborted when shutdown begins: what listens until then (the change feed) ends with it. */
  readonly stopping: AbortSignal;
  /** Starts `start` now or, while Redis does not answer, every 2 s until it does (see startWhenRedisAnswers); `what` defaults to the part's name. */
  readonly whenRedisAnswers: (start: () => Promise<void>, what?: string) => void;
}

/** What a part's stop is given. */
interface Stopping {
  /** Whether the part's start ran: one that never did (a start-up that failed before it) has nothing to drain. */
  readonly started: boolean;
  /** The grace period work in flight gets. */
  readonly graceMs: number;
  /** The shutdown's steps, for a stop that bounds itself. */
  readonly steps: ShutdownSteps;
}

/** A part of a process that has something to start or stop. */
interface Part {
  readonly name: string;
  readonly phase: Phase;
  readonly start?: (starting: Starting) => Promise<void> | void;
  /**
   * Runs at shutdown whether or not the part started (a server built but never listening still
   * closes). One shutdown step (see ShutdownSteps.run) unless `boundsItself`.
   */
  readonly stop?: (stopping: Stopping) => Promise<unknown> | void;
  /** The stop bounds its own waits (the worker by its grace period); it may answer 'forced', and so does the shutdown. */
  readonly boundsItself?: boolean;
  /**
   * Stops before every other part, whatever its phase: an entrance (the admin API), so no request
   * starts work while the rest stops.
   */
  readonly stopsFirst?: boolean;
}

/**
 * A process's parts, started in phase order and stopped in the reverse, each stop bounded so that
 * the whole shutdown ends within the grace period plus SHUTDOWN_SLACK_MS whatever Redis is doing.
 */
export class Lifecycle {
  private readonly parts: Part[] = [];
  private readonly started = new Set<Part>();
  private readonly stopping = new AbortController();

  constructor(private readonly logger: Logger) {}

  add(part: Part): void {
    this.parts.push(part);
  }

  /** Starts every part in order; rejects with the first start that fails (the parts after it are not started). */
  async start(): Promise<void> {
    for (const part of this.inPhaseOrder()) {
      if (!part.start) continue;
      this.started.add(part);
      await part.start({
        stopping: this.stopping.signal,
        whenRedisAnswers: (start, what = part.name) =>
          startWhenRedisAnswers(what, start, this.logger, () => this.stopping.signal.aborted),
      });
    }
  }

  /** Stops every part, the entrances first and the rest in reverse phase order; 'forced' when a stop was. */
  async close(graceMs: number): Promise<'drained' | 'forced'> {
    this.stopping.abort();
    const steps = new ShutdownSteps(Date.now() + graceMs + SHUTDOWN_SLACK_MS - SHUTDOWN_STEP_MS);
    const reversed = this.inPhaseOrder().reverse();
    let ended: 'drained' | 'forced' = 'drained';
    for (const part of [...reversed.filter((p) => p.stopsFirst), ...reversed.filter((p) => !p.stopsFirst)]) {
      const work = part.stop?.({ started: this.started.has(part), graceMs, steps });
      if (work === undefined) continue;
      if (!part.boundsItself) await steps.run(work);
      else if ((await work) === 'forced') ended = 'forced';
    }
    return ended;
  }

  private inPhaseOrder(): Part[] {
    return PHASES.flatMap((phase) => this.parts.filter((part) => part.phase === phase));
  }
}
