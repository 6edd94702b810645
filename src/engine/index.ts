/**
 * The engine's public entry: `createEngine(config, options)` and the types of what it builds. The
 * CLI, the tests and the bench import from here; the files beside it are its parts.
 */
import type { AdminServer, HealthServer } from '../admin/server.js';
import type { Config } from '../config/env.js';
import type { Tracing } from '../domain/trace.js';
import type { ReadModelProjector } from '../ingest/read-model-projector.js';
import type { Logger } from '../logger.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import { seriesAtStart } from '../metrics/observers.js';
import { VERSION } from '../version.js';
import type { Stores } from './assembly.js';
import { openConnections, traceExport } from './foundation.js';
import { readModelProjector, streamConsumers } from './intake.js';
import { Lifecycle } from './lifecycle.js';
import { serversOf } from './servers.js';
import { storesOf } from './stores.js';
import { workerOf, type DeliveryWorker, type WorkerSettings } from './worker.js';

export type { DeliveryWorker } from './worker.js';
export type { Stores } from './assembly.js';
export { SHUTDOWN_SLACK_MS } from './lifecycle.js';

/**
 * What a process runs: `all` is `hookline start` (API and worker), `api` and `worker` run one each,
 * `tools` only opens the stores (the CLI's key and dead-letter commands).
 */
export type EngineRole = 'all' | 'api' | 'worker' | 'tools';

/**
 * A configuration whose Redis is settled (the CLI resolves the embedded default first), and its
 * secret key too except for the `tools` role, which never opens a secret.
 */
export type EngineConfig = Config & { readonly redisUrl: string };

export interface EngineOptions {
  role: EngineRole;
  logger: Logger;
  /**
   * Listen on the configured addresses when started: the admin API on HOOKLINE_API_HOST and
   * HOOKLINE_API_PORT, the health server on HOOKLINE_METRICS_PORT. Tests leave it off and call
   * `inject()`.
   */
  listen?: boolean;
  /** One registry for several engines of one process (the bench); default a registry of its own. */
  metrics?: Metrics;
  nowMs?: () => number;
  /** What tests and the bench tune about the worker; production uses the defaults. */
  worker?: Pick<WorkerSettings, 'breaker' | 'webhookCacheTtlMs' | 'onOutcome' | 'extraCa' | 'replays'>;
  /** Where the vendor portal's built browser app is; default the package's `dist/portal/`. */
  portalAssetsDir?: string;
  /** Spans go here instead of to the exporter config.tracing describes (tests). */
  tracing?: Tracing;
}

/** A running (or ready to run) Hookline process. */
export interface Engine {
  readonly role: EngineRole;
  readonly config: EngineConfig;
  readonly stores: Stores;
  readonly metrics: Metrics | undefined;
  /** The admin API (roles all and api). */
  readonly api: AdminServer | undefined;
  /**
   * `/healthz`, `/readyz` and `/metrics` on a port of their own: a standalone worker's, and an API's
   * when HOOKLINE_METRICS_ON_API_PORT is false.
   */
  readonly health: HealthServer | undefined;
  /** The delivery worker (roles all and worker). */
  readonly worker: DeliveryWorker | undefined;
  /**
   * The read models' projector (every role but tools): applies what ingest appended to the
   * projection stream, so the lookups see it. start() starts it; a test app starts it alone.
   */
  readonly readModels: ReadModelProjector | undefined;
  /** Resolves true when its Redis answers. */
  isReady(): Promise<boolean>;
  /**
   * Starts listening (when asked), the read models' projector, the worker and the ingest-stream consumer; answers where it
   * listens. Logs nothing: the caller writes the process's start-up line (see `startupLine`).
   */
  start(): Promise<{ api?: string; health?: string }>;
  /**
   * Stops in order (API; stream consumer; projector; worker, whose attempts in flight get `graceMs`; queues;
   * connections) and always returns within `graceMs` plus SHUTDOWN_SLACK_MS, whatever Redis is
   * doing: a step that needs Redis gets a moment, and connections are dropped rather than left
   * reconnecting. `forced` when attempts were still in flight past the grace period.
   */
  close(graceMs?: number): Promise<'drained' | 'forced'>;
}

/**
 * The composition root: builds a whole Hookline process (connections, stores, the admin API, the
 * delivery worker, the ingest-stream consumer, a worker's health server) for `options.role`. The
 * CLI, the tests and the bench all build their engines here, so they run the production assembly.
 * Nothing listens or consumes until `start()`. Each part adds its start and stop to the process's
 * lifecycle as it is built, in a phase that says when it runs (see Lifecycle in lifecycle.ts), so
 * `close()` stops them in the reverse order: the API first, the trace export last.
 */
export async function createEngine(config: EngineConfig, options: EngineOptions): Promise<Engine> {
  const { role, logger } = options;
  const tools = role === 'tools';
  const nowMs = options.nowMs ?? Date.now;
  if (!tools && config.secretKey === undefined)
    throw new Error(`a ${role} engine needs the secret key of webhook secrets`);
  const lifecycle = new Lifecycle(logger);

  // 1. What everything runs on (the trace export first, so it stops last), then metrics and stores.
  const tracing = await traceExport(config, role, options.tracing, lifecycle);
  const { redis, queueConnection, workerConnection, outages, isReady } = openConnections(
    config,
    role,
    logger,
    lifecycle,
  );
  const metrics = tools ? undefined : (options.metrics ?? createMetrics({ role }));
  if (metrics) seriesAtStart(metrics, VERSION);
  const stores = storesOf(config, { redis, queueConnection, logger, metrics, tracing, nowMs, tools }, lifecycle);

  // 2. The worker (roles all and worker), and what takes work in beside the API.
  const worker = workerConnection
    ? workerOf(
        config,
        stores,
        {
          workerConnection,
          logger,
          metrics,
          tracing,
          watchConnection: (connection) => outages.watch(connection, 'first attempts'),
          tuning: options.worker,
          nowMs,
        },
        lifecycle,
      )
    : undefined;
  const intake = { redis, stores, logger, metrics, outages, nowMs };
  const readModels = tools ? undefined : readModelProjector(intake, lifecycle);
  if (worker) streamConsumers(config, intake, lifecycle);

  // 3. The servers, built after the worker (their scrapes read it), though they listen before it starts.
  const { api, health, addresses } = await serversOf(
    config,
    {
      role,
      redis,
      stores,
      worker,
      metrics,
      isReady,
      logger,
      nowMs,
      listen: options.listen ?? false,
      portalAssetsDir: options.portalAssetsDir,
    },
    lifecycle,
  );

  return {
    role,
    config,
    stores,
    metrics,
    api,
    health,
    worker,
    readModels,
    isReady,
    async start() {
      await lifecycle.start();
      return { ...addresses };
    },
    close: (graceMs = config.shutdownGraceMs) => lifecycle.close(graceMs),
  };
}
