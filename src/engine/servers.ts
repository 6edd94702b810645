/**
 * A process's servers: the admin API (roles all and api) and a health server (a worker's, or an
 * API's /metrics on a port of their own). Built, not listening: they take their ports when the
 * process starts (when asked to listen), in the lifecycle's serving phase, before any job is taken.
 */
import { buildAdminServer, buildHealthServer } from '../admin/server.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import { scrapeCollector } from '../metrics/observers.js';
import { projectionBacklog } from '../store/read-model-feed.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import type { Stores } from './assembly.js';
import type { EngineConfig, EngineRole } from './index.js';
import { quietListen, type Lifecycle } from './lifecycle.js';
import type { DeliveryWorker } from './worker.js';

/** Where a started process listens (what `Engine.start` answers). */
interface Addresses {
  api?: string;
  health?: string;
}

/** The servers of a process for its role, and the addresses they listen on once started. */
export async function serversOf(
  config: EngineConfig,
  on: {
    role: EngineRole;
    redis: Redis;
    stores: Stores;
    worker: DeliveryWorker | undefined;
    metrics: Metrics | undefined;
    isReady: () => Promise<boolean>;
    logger: Logger;
    nowMs: () => number;
    /** Listen on the configured addresses when started (tests leave it off and call `inject()`). */
    listen: boolean;
    portalAssetsDir: string | undefined;
  },
  lifecycle: Lifecycle,
) {
  const { role, stores, worker, metrics, isReady, logger, nowMs } = on;
  const runsApi = role === 'all' || role === 'api';
  const addresses: Addresses = {};
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
        projectionBacklog: () => projectionBacklog(on.redis, stores.keys.readModels.projection, nowMs()),
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
          ...(on.portalAssetsDir === undefined ? {} : { portalAssetsDir: on.portalAssetsDir }),
        }),
      )
    : undefined;
  if (api)
    lifecycle.add({
      name: 'admin API',
      phase: 'serving',
      async start() {
        // Load the listing's in-memory index now rather than on the first request (in the background:
        // with Redis down at start, the API still starts, answers /readyz 503, and recovers by itself).
        void stores.machines.refresh().catch((error: Error) => {
          if (!isRedisUnavailable(error))
            logger.warn({ err: error.message }, 'machine index not loaded yet; the first listing will load it');
        });
        if (on.listen) addresses.api = await quietListen(api, config.apiHost, config.apiPort);
      },
      // It takes its port before the worker starts, yet closes before anything else: no new request
      // starts work while the rest of the process stops.
      stopsFirst: true,
      stop: () => api.close(),
    });
  // A worker's probes and scrapes have a port of their own, and so do an API's scrapes when they must stay off its port.
  const health =
    scraped && (role === 'worker' || (runsApi && !config.metricsOnApiPort))
      ? await buildHealthServer({ logger, isReady, metrics: scraped })
      : undefined;
  if (health)
    lifecycle.add({
      name: 'health server',
      phase: 'serving',
      async start() {
        if (on.listen) addresses.health = await quietListen(health, config.apiHost, config.metricsPort);
      },
      // It closes after the worker (a later phase): probes and scrapes are answered while it drains.
      stop: () => health.close(),
    });
  return { api, health, addresses };
}
