/**
 * The engine's public entry: `createEngine(config, options)` and the types of what it builds. The
 * CLI, the tests and the bench import from here; the files beside it are its parts.
 */
import { RETENTION_PASS_EVERY_MS } from '../delivery/retention.js';
import { buildAdminServer, buildHealthServer, type AdminServer, type HealthServer } from '../admin/server.js';
import type { Config } from '../config/env.js';
import { ReadModelProjector } from '../ingest/read-model-projector.js';
import { StreamIngestSource } from '../ingest/stream-source.js';
import type { Logger } from '../logger.js';
import { createMetrics, type Metrics } from '../metrics/metrics.js';
import { projectionObserver, scrapeCollector, seriesAtStart, streamDeadLetterObserver } from '../metrics/observers.js';
import { projectionBacklog } from '../store/read-model-feed.js';
import { connectRedis, isRedisUnavailable, pingRedis } from '../store/redis.js';
import { VERSION } from '../version.js';
import { hostname } from 'node:os';
import { startTracing } from '../tracing/tracing.js';
import type { Tracing } from '../domain/trace.js';
import { composeStores, type Stores } from './assembly.js';
import {
  outageLog,
  quietListen,
  SHUTDOWN_SLACK_MS,
  SHUTDOWN_STEP_MS,
  ShutdownSteps,
  startWhenRedisAnswers,
} from './lifecycle.js';
import { composeWorker, type DeliveryWorker, type WorkerSettings } from './worker.js';

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
 * Nothing listens or consumes until `start()`; `close()` owns the shutdown order.
 */
export async function createEngine(config: EngineConfig, options: EngineOptions): Promise<Engine> {
  const { role, logger } = options;
  const runsApi = role === 'all' || role === 'api';
  const runsWorker = role === 'all' || role === 'worker';
  const tools = role === 'tools';
  const nowMs = options.nowMs ?? Date.now;
  if (!tools && config.secretKey === undefined)
    throw new Error(`a ${role} engine needs the secret key of webhook secrets`);

  // 1. Connections: the application's (auto-pipelined, failing fast so requests answer 503), BullMQ's
  // queues' and, in a worker, BullMQ's workers' (both waiting out an outage). The CLI's tools fail fast everywhere.
  const name = `hookline-${role}`;
  const redis = connectRedis(config.redisUrl, { connectionName: name, maxRetriesPerRequest: tools ? 3 : 2 });
  const queueConnection = connectRedis(config.redisUrl, {
    connectionName: `${name}-queues`,
    maxRetriesPerRequest: tools ? 3 : null,
    autoPipelining: false,
  });
  const workerConnection = runsWorker
    ? connectRedis(config.redisUrl, {
        connectionName: 'hookline-worker-jobs',
        maxRetriesPerRequest: null,
        autoPipelining: false,
      })
    : undefined;
  const outages = outageLog(logger, config.redisUrl);
  for (const [label, connection] of [
    ['app', redis],
    ['queues', queueConnection],
    ['worker', workerConnection],
  ] as const) {
    if (connection) outages.watch(connection, label);
  }
  const isReady = () => pingRedis(redis, 1_000);

  // 2. Metrics and stores.
  const metrics = tools ? undefined : (options.metrics ?? createMetrics({ role }));
  if (metrics) seriesAtStart(metrics, VERSION);
  // Trace export: the SDK loaded only when an endpoint is configured (config/otel.ts).
  const tracing = tools
    ? undefined
    : (options.tracing ??
      (await startTracing(config.tracing, {
        serviceVersion: VERSION,
        instanceId: `${hostname()}:${process.pid}:${role}`,
      })));
  const stores = composeStores({
    ...(metrics ? { observability: { metrics, logger } } : {}),
    redis,
    queueConnection,
    redisPrefix: config.redisPrefix,
    secretKey: config.secretKey,
    retryScheduleMs: config.retryScheduleMs,
    queuePartitions: config.queuePartitions,
    secretRotationOverlapMs: config.secretRotationOverlapMs,
    dedupeWindowMs: config.dedupeWindowMs,
    maxEventBytes: config.maxEventBytes,
    retentionMs: config.retentionMs,
    eventLog: config.eventLog,
    ingestStreams: config.ingestStreams,
    replayCountMax: config.replayCountMax,
    replayCountBudgetPerSecond: config.replayCountBudgetPerSecond,
    replayRunningMax: config.replayRunningMax,
    replayQueuedMax: config.replayQueuedMax,
    // A killed worker's attempts return to the queue after its lock, and then end within the timeout.
    erasureSettleMs: config.workerLockDurationMs + config.deliveryTimeoutMs + 1_000,
    ...(config.operationalWebhook ? { operationalWebhooks: { logger } } : {}),
    ...(tracing === undefined ? {} : { tracing }),
    nowMs,
  });

  // 3. The worker (and the ingest-stream consumer that runs beside it).
  const worker =
    runsWorker && workerConnection
      ? composeWorker(stores, {
          workerConnection,
          logger,
          concurrency: config.workerConcurrency,
          tlsSessionCache: config.tlsSessionCache,
          ...(config.egressProxy === undefined ? {} : { egressProxy: config.egressProxy }),
          retryScheduleMs: config.retryScheduleMs,
          deliveryTimeoutMs: config.deliveryTimeoutMs,
          allowPrivateTargets: config.allowPrivateTargets,
          sustainedFailureWindowMs: config.sustainedFailureWindowMs,
          lockDurationMs: config.workerLockDurationMs,
          watchConnection: (connection) => outages.watch(connection, 'first attempts'),
          ...(metrics ? { metrics } : {}),
          ...(config.operationalWebhook ? { operationalWebhook: config.operationalWebhook } : {}),
          ...(tracing === undefined ? {} : { tracing }),
          ...options.worker,
          nowMs,
        })
      : undefined;
  // One consumer per ingest stream, each blocking on a connection of its own.
  const streams =
    worker && config.ingestStream
      ? Array.from(
          { length: config.ingestStreams },
          (_, n) =>
            new StreamIngestSource({
              redis,
              stream: stores.keys.events.streamOf(n),
              deadLetterStream: stores.keys.events.deadOf(n),
              ...(metrics ? { observeDeadLetter: streamDeadLetterObserver(metrics) } : {}),
              ingestor: stores.ingestor,
              logger,
              watchConnection: (connection) => outages.watch(connection, `stream ${n}`),
            }),
        )
      : [];

  // The read models' projector runs in every process that ingests or answers lookups: an API alone
  // (a deployment whose workers are down or elsewhere) still shows what it accepted, and several
  // processes share the stream through one consumer group.
  const readModels = tools
    ? undefined
    : new ReadModelProjector({
        redis,
        stream: stores.keys.readModels.projection,
        machines: stores.machines,
        agents: stores.agents,
        tasks: stores.tasks,
        logger,
        watchConnection: (connection) => outages.watch(connection, 'read models'),
        ...(metrics ? { observe: projectionObserver(metrics) } : {}),
        nowMs,
      });

  // 4. The servers: the admin API, a health server (a worker's, or the API's /metrics on a port of its own); none listens yet.
  const collect = metrics
    ? scrapeCollector(metrics, {
        queueCounts: () => stores.queues.counts(),
        ping: isReady,
        circuitsOpen: () => worker?.endpoints.openEndpoints(nowMs()).length ?? 0,
        fifoLines: () => stores.fifoLines.linesWaiting(),
        fifoOldestHeadAgeMs: () => stores.fifoLines.oldestHeadAgeMs(nowMs()),
        ...(worker?.journal
          ? { journalAgeMs: () => worker.journal!.backlog(nowMs()).then((backlog) => backlog.oldestAgeMs) }
          : {}),
        projectionBacklog: () => projectionBacklog(redis, stores.keys.readModels.projection, nowMs()),
      })
    : undefined;
  const scraped = metrics && collect ? { ...metrics, collect } : undefined;
  const api = runsApi
    ? await buildAdminServer(
        stores.adminDeps({
          logger,
          bodyLimitBytes: config.apiBodyLimitBytes,
          isReady,
          ...(scraped ? { metrics: scraped } : {}),
          rateLimitPerSecond: config.rateLimitPerSecond,
          ingestRateLimitPerSecond: config.ingestRateLimitPerSecond,
          unauthenticatedRateLimitPerSecond: config.unauthenticatedRateLimitPerSecond,
          allowPrivateTargets: config.allowPrivateTargets,
          metricsRoute: config.metricsOnApiPort,
          ...(config.publicUrl === undefined ? {} : { publicUrl: config.publicUrl }),
          listenAddress: { host: config.apiHost, port: config.apiPort },
          trustProxy: config.trustProxy,
          ...(options.portalAssetsDir === undefined ? {} : { portalAssetsDir: options.portalAssetsDir }),
        }),
      )
    : undefined;
  // A worker's probes and scrapes have a port of their own, and so do an API's scrapes when they must stay off its port.
  const health =
    scraped && (role === 'worker' || (runsApi && !config.metricsOnApiPort))
      ? await buildHealthServer({ logger, isReady, metrics: scraped })
      : undefined;

  let closing = false;
  // Whether the worker took work: one that never started (a start that failed, e.g. a port in use) has nothing to drain.
  let workerStarted = false;
  // The change feed keeps this process's copies of webhooks current (the CLI's tools keep none).
  const feedStop = new AbortController();
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
      const addresses: { api?: string; health?: string } = {};
      if (!tools)
        startWhenRedisAnswers(
          'webhook change feed',
          () => stores.webhookCopies.listen(feedStop.signal),
          logger,
          () => closing,
        );
      if (readModels)
        startWhenRedisAnswers(
          'read-model projector',
          () => readModels.start(),
          logger,
          () => closing,
        );
      if (api) {
        // Load the listing's in-memory index now rather than on the first request (in the background:
        // with Redis down at start, the API still starts, answers /readyz 503, and recovers by itself).
        void stores.machines.refresh().catch((error: Error) => {
          if (!isRedisUnavailable(error))
            logger.warn({ err: error.message }, 'machine index not loaded yet; the first listing will load it');
        });
        if (options.listen) addresses.api = await quietListen(api, config.apiHost, config.apiPort);
      }
      if (health && options.listen) addresses.health = await quietListen(health, config.apiHost, config.metricsPort);
      if (worker) {
        workerStarted = true;
        worker.pool.start();
        worker.pool.readers.forEach((reader, n) =>
          startWhenRedisAnswers(
            `first-attempt reader ${n}`,
            // What a dead worker journaled is projected before its batches can be claimed here and
            // re-run: a re-run reads the delivery log to skip what was delivered.
            async () => {
              await worker.journal?.drain();
              await reader.start();
            },
            logger,
            () => closing,
          ),
        );
        worker.fifo.start();
        worker.replays.start();
        worker.journal?.start();
        startWhenRedisAnswers(
          'retention schedule',
          () => stores.queues.scheduleRetention(RETENTION_PASS_EVERY_MS),
          logger,
          () => closing,
        );
        for (const stream of streams)
          startWhenRedisAnswers(
            'ingest stream consumer',
            () => stream.start(),
            logger,
            () => closing,
          );
      }
      return addresses;
    },
    async close(graceMs = config.shutdownGraceMs) {
      closing = true;
      feedStop.abort();
      const steps = new ShutdownSteps(Date.now() + graceMs + SHUTDOWN_SLACK_MS - SHUTDOWN_STEP_MS);
      let ended: 'drained' | 'forced' = 'drained';
      await steps.run(api?.close());
      // The stream consumers first: a batch they ingest while stopping still reaches the projection stream.
      if (worker) await steps.run(Promise.all(streams.map((stream) => stream.stop())));
      await steps.run(readModels?.stop());
      if (worker) {
        if (workerStarted) {
          ended = await worker.close(graceMs);
          logger.info(
            { ended },
            ended === 'drained'
              ? 'in-flight deliveries finished'
              : 'grace period over; unfinished deliveries return to the queue',
          );
        } else await worker.close(0);
      }
      // After the worker: the counts of its last attempts are in the buffer.
      await steps.run(stores.endpointStats.close());
      await steps.run(health?.close());
      stores.machines.close();
      await steps.run(stores.queues.close());
      await Promise.all(
        [redis, queueConnection, ...(workerConnection ? [workerConnection] : [])].map((connection) =>
          steps.closeConnection(connection),
        ),
      );
      // Last: the spans of the final attempts are exported (bounded by the exporter's timeout).
      if (options.tracing === undefined) await steps.run(tracing?.shutdown());
      return ended;
    },
  };
}
