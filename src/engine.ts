import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { buildAdminServer, buildHealthServer, type AdminDeps, type AdminServer, type HealthServer } from './admin/server.js';
import type { Config } from './config/env.js';
import { redisUrlForLog } from './config/redis-url.js';
import { DEFAULT_BREAKER_OPTIONS, EndpointBreakers, type BreakerOptions, type CircuitChange } from './delivery/breaker.js';
import { HttpSender } from './delivery/http-sender.js';
import type { DeliveryProcessorDeps, FinishedOutcome } from './delivery/attempt.js';
import { createBatchProcessor } from './delivery/batch-processor.js';
import { createOperationalProcessor, operationalWebhookQueuer } from './delivery/operational.js';
import { createSingleProcessor } from './delivery/single-processor.js';
import { DeliveryQueues } from './delivery/queue.js';
import { DeadLetterReplayer } from './delivery/replay.js';
import { PauseHolds } from './delivery/pause-holds.js';
import { FifoDriver, fifoLeaseMs } from './delivery/fifo-driver.js';
import { partitionOf } from './delivery/jobs.js';
import { SendSlots } from './delivery/send-slots.js';
import { StorageGate } from './delivery/storage-gate.js';
import { TestEventSender } from './delivery/test-event.js';
import { DeferralWakeups } from './delivery/wakeups.js';
import { EndpointFlow } from './delivery/endpoint-flow.js';
import { CachedWebhookSource } from './delivery/webhook-cache.js';
import { DeliveryWorkerPool } from './delivery/worker.js';
import { endpointParts } from './domain/endpoint.js';
import { IngestFilters } from './ingest/filters.js';
import { CachedSubscriptions } from './ingest/subscriptions.js';
import { Ingestor } from './ingest/ingest.js';
import { StreamIngestSource } from './ingest/stream-source.js';
import type { Logger } from './logger.js';
import { createMetrics, initialiseSeries, type Metrics } from './metrics/metrics.js';
import {
  breakerObserver,
  deliveryObserver,
  fifoObserver,
  flowObserver,
  ingestObserver,
  scrapeCollector,
  streamDeadLetterObserver,
} from './metrics/observers.js';
import { RedisPortalSessions } from './store/portal-sessions.js';
import { RedisApiKeyStore } from './store/api-keys.js';
import { RedisAttemptFeed, type FeedEntry } from './store/attempt-feed.js';
import { RedisCircuitLog } from './store/circuits.js';
import { RedisDeliveryLog } from './store/delivery-log.js';
import { RedisEventDedupe } from './store/event-dedupe.js';
import { RedisEndpointStats, type EndpointStatsRecorder } from './store/endpoint-stats.js';
import { RedisEndpointMemory } from './store/endpoints.js';
import { RedisFifoLines } from './store/fifo-lines.js';
import { RedisHeldDeliveries } from './store/held-deliveries.js';
import { RedisEndpointFlow } from './store/endpoint-flow.js';
import { redisKeys } from './store/keys.js';
import { RedisRecentEvents } from './store/recent-events.js';
import { RedisMachineStore } from './store/machines.js';
import { OperatorViews } from './store/operator-views.js';
import { RedisEventBudget, RedisRequestCounter } from './store/rate-limiter.js';
import { createAgentStatusStore, createTaskStore } from './store/read-models.js';
import { connectRedis, isRedisUnavailable, pingRedis, type Redis } from './store/redis.js';
import { RedisReplayTasks } from './store/replay-tasks.js';
import { RedisSendRate, type SendRateLimiter } from './store/send-rate.js';
import { SecretBox } from './store/secret-box.js';
import { RedisWebhookChanges, type WebhookChange, type WebhookChangeListener } from './store/webhook-changes.js';
import { RedisWebhookStore } from './store/webhooks.js';
import { VERSION } from './version.js';

/**
 * The package's `dist/portal/`, which `npm run build` writes. This module runs from `src/` (tsx) or
 * `dist/` (built): the package root is one folder up either way.
 */
const PORTAL_ASSETS_DIR = fileURLToPath(new URL('../dist/portal/', import.meta.url));

interface StoreSettings {
  /** The application connection (auto-pipelined). */
  redis: Redis;
  /** A connection for BullMQ's queues (no auto-pipelining). */
  queueConnection: Redis;
  redisPrefix: string;
  /** Undefined for the CLI's tools, which never open a secret. */
  secretKey: Buffer | undefined;
  retryScheduleMs: readonly number[];
  queuePartitions: number;
  secretRotationOverlapMs: number;
  /** How long ingest remembers an event id (HOOKLINE_DEDUPE_WINDOW). */
  dedupeWindowMs: number;
  /** When given, ingest counts batches into it and logs one line per batch. */
  observability?: { metrics: Metrics; logger: Logger };
  /**
   * When given (HOOKLINE_OPERATIONAL_WEBHOOK_URL is set), each disable the engine makes and each
   * re-enable of such a webhook queues an operational webhook, whichever process makes the change.
   */
  operationalWebhooks?: { logger: Logger };
  nowMs?: () => number;
}

/** Every store and service of the engine over one Redis: what the API, the worker and the CLI's tools share. */
function composeStores(settings: StoreSettings) {
  const nowMs = settings.nowMs ?? Date.now;
  const { redis } = settings;
  const keys = redisKeys(settings.redisPrefix);
  const fifoLines = new RedisFifoLines(redis, keys, (webhookId) => partitionOf(webhookId, settings.queuePartitions), settings.queuePartitions);
  const queues = new DeliveryQueues({
    connection: settings.queueConnection,
    keys,
    partitions: settings.queuePartitions,
    retryScheduleMs: settings.retryScheduleMs,
    lines: fifoLines,
    nowMs,
    // Connection trouble is logged once per outage by the connection watcher; this keeps BullMQ quiet.
    onError: (error) => settings.observability?.logger.debug({ err: error.message }, 'delivery queue error'),
  });
  const webhookCopies = webhookCopyCaches(new RedisWebhookChanges(redis, keys), settings.observability?.logger);
  const pauseHolds = new PauseHolds({ index: new RedisHeldDeliveries(redis, keys), queues, lines: fifoLines, nowMs });
  const webhooks = new RedisWebhookStore(
    redis,
    keys,
    new SecretBox(settings.secretKey),
    () => new Date(nowMs()),
    settings.secretRotationOverlapMs,
    settings.operationalWebhooks && operationalWebhookQueuer(queues, settings.operationalWebhooks.logger),
    webhookCopies.tell,
    (webhookId) => pauseHolds.release(webhookId),
  );
  const tasks = createTaskStore(redis, keys);
  const agents = createAgentStatusStore(redis, keys);
  const machines = new RedisMachineStore(redis, keys);
  const deliveryLog = new RedisDeliveryLog(redis, keys);
  const replayTasks = new RedisReplayTasks(redis, keys, tasks, (refs) => deliveryLog.progressOf(refs), nowMs);
  const replayer = new DeadLetterReplayer({ history: deliveryLog, queues, tasks, replayTasks, nowMs });
  const circuits = new RedisCircuitLog(redis, keys);
  const endpointFlow = new RedisEndpointFlow(redis, keys);
  const operatorViews = new OperatorViews({ webhooks, history: deliveryLog, circuits });
  const attemptFeed = new RedisAttemptFeed(redis, keys, nowMs);
  // Lost counts only thin the portal's stats: worth a debug line, not a warning.
  const endpointStats = new RedisEndpointStats(redis, keys, (error) =>
    settings.observability?.logger.debug({ err: error.message }, 'endpoint stats not written'),
  );
  const testEvents = new TestEventSender({ queues, log: deliveryLog, nowMs });
  const portalSessions = new RedisPortalSessions(redis, keys, nowMs);
  const recentEvents = new RedisRecentEvents(redis, keys);
  const dedupe = new RedisEventDedupe(redis, settings.redisPrefix, { windowMs: settings.dedupeWindowMs });
  const ingestor = new Ingestor({
    dedupe,
    machines,
    agents,
    tasks,
    subscriptions: webhookCopies.add(new CachedSubscriptions(webhooks, webhookCopies.ttlMs, nowMs)),
    deliveries: queues,
    filters: webhookCopies.add(new IngestFilters(webhooks, webhookCopies.ttlMs, nowMs)),
    recentEvents,
    nowMs,
    ...(settings.observability ? { observe: ingestObserver(settings.observability.metrics, settings.observability.logger) } : {}),
  });
  return {
    redis,
    keys,
    apiKeys: new RedisApiKeyStore(redis, keys),
    webhooks,
    tasks,
    agents,
    machines,
    deliveryLog,
    queues,
    fifoLines,
    pauseHolds,
    replayer,
    replayTasks,
    circuits,
    endpointFlow,
    operatorViews,
    attemptFeed,
    endpointStats,
    testEvents,
    portalSessions,
    dedupe,
    ingestor,
    /** The process's copies of webhooks (ingest's lookups, a worker's webhook cache) and the feed that keeps them current. */
    webhookCopies,
    /** The admin API's dependencies. */
    adminDeps(options: {
      logger: Logger;
      bodyLimitBytes: number;
      isReady: () => Promise<boolean>;
      metrics?: AdminDeps['metrics'];
      /** Requests per second per API key (event ingest exempt); unset or 0: no limit. */
      rateLimitPerSecond?: number;
      /** Events ingested per second per API key; unset or 0: no limit. */
      ingestRateLimitPerSecond?: number;
      /** Requests per second per client address that authenticate nothing; unset or 0: no limit. */
      unauthenticatedRateLimitPerSecond?: number;
      /** Accept callback URLs on loopback and private addresses; default false (the SSRF guard). */
      allowPrivateTargets?: boolean;
      /** Serve `GET /metrics` on the API's port; default true. */
      metricsRoute?: boolean;
      /** Where browsers reach the portal (HOOKLINE_PUBLIC_URL); unset: the API's listen address, when that is loopback. */
      publicUrl?: string;
      /** HOOKLINE_API_HOST and _PORT, for portal links without HOOKLINE_PUBLIC_URL. */
      listenAddress?: { host: string; port: number };
      /** HOOKLINE_TRUST_PROXY; none by default. */
      trustProxy?: readonly string[];
      /** The vendor portal's built browser app; default the package's (PORTAL_ASSETS_DIR). */
      portalAssetsDir?: string;
    }): AdminDeps {
      const {
        rateLimitPerSecond,
        ingestRateLimitPerSecond,
        unauthenticatedRateLimitPerSecond,
        allowPrivateTargets,
        publicUrl,
        listenAddress,
        portalAssetsDir,
        ...rest
      } = options;
      return {
        ...rest,
        allowPrivateTargets: allowPrivateTargets ?? false,
        portalAssetsDir: portalAssetsDir ?? PORTAL_ASSETS_DIR,
        ...(rateLimitPerSecond ? { rateLimit: { counter: new RedisRequestCounter(redis, keys), perSecond: rateLimitPerSecond, nowMs } } : {}),
        ...(ingestRateLimitPerSecond ? { ingestRateLimit: { budget: new RedisEventBudget(redis, keys), perSecond: ingestRateLimitPerSecond, nowMs } } : {}),
        ...(unauthenticatedRateLimitPerSecond
          ? { addressRateLimit: { counter: new RedisRequestCounter(redis, keys, keys.addressRateWindow), perSecond: unauthenticatedRateLimitPerSecond, nowMs } }
          : {}),
        apiKeys: this.apiKeys,
        webhooks,
        nowMs,
        tasks: replayTasks,
        agents,
        machines,
        ingestor,
        deliveries: { history: deliveryLog, replayer, testEvents },
        operator: { views: operatorViews, replayer },
        portal: { sessions: portalSessions, publicUrl, ...(listenAddress === undefined ? {} : { listenAddress }) },
        stats: { stats: endpointStats, circuits, lines: fifoLines, flow: endpointFlow },
        recentEvents,
      };
    },
  };
}

/**
 * How long a process may use a webhook it read (ingest's subscription lookup and filters, a worker's
 * webhook cache): long while the change feed is live, since a change drops the copies at once; short
 * while it is not (before the first subscription, during a reconnect), when only time makes a
 * change apply.
 */
const WEBHOOK_COPY_TTL_LIVE_MS = 60_000;
const WEBHOOK_COPY_TTL_MS = 2_000;

/**
 * The caches of webhooks in one process and what keeps them current: `tell` (the registry calls it
 * after every change it stores) drops this process's copies at once and publishes the change for the
 * other processes; `listen` hears theirs until aborted.
 */
function webhookCopyCaches(feed: RedisWebhookChanges, logger: Logger | undefined) {
  const caches: WebhookChangeListener[] = [];
  let live = false;
  const all: WebhookChangeListener = {
    changed: (change) => {
      for (const cache of caches) cache.changed(change);
    },
    reset: () => {
      for (const cache of caches) cache.reset();
    },
  };
  return {
    ttlMs: () => (live ? WEBHOOK_COPY_TTL_LIVE_MS : WEBHOOK_COPY_TTL_MS),
    add<T extends WebhookChangeListener>(cache: T): T {
      caches.push(cache);
      return cache;
    },
    tell: (change: WebhookChange): void => {
      all.changed(change);
      // Lost, other processes apply the change when their copies expire (WEBHOOK_COPY_TTL_LIVE_MS at most).
      feed.publish(change).catch((error: Error) => logger?.warn({ err: error.message, webhookId: change.webhookId }, 'webhook change not published'));
    },
    listen(signal: AbortSignal): Promise<void> {
      return feed.listen(all, signal, (up) => (live = up));
    },
  };
}

export type Stores = ReturnType<typeof composeStores>;

interface WorkerSettings {
  /** A connection for BullMQ's workers (maxRetriesPerRequest null, no auto-pipelining). */
  workerConnection: Redis;
  logger: Logger;
  concurrency: number;
  retryScheduleMs: readonly number[];
  deliveryTimeoutMs: number;
  allowPrivateTargets: boolean;
  sustainedFailureWindowMs: number;
  /** A killed worker's in-flight jobs run again after this. */
  lockDurationMs?: number;
  /** How long a worker trusts its cached copy of a webhook. */
  webhookCacheTtlMs?: number;
  /** Circuit-breaker tuning; defaults in DEFAULT_BREAKER_OPTIONS. */
  breaker?: Partial<BreakerOptions>;
  /** Counts attempts, outcomes and circuit changes. */
  metrics?: Metrics;
  /** The operator's receiver of operational webhooks and its secret; absent: this worker sends none. */
  operationalWebhook?: { url: string; secret: string };
  onOutcome?: (outcome: FinishedOutcome) => void;
  nowMs?: () => number;
}

/** Logs a circuit's changes (open and close at warn, with the vendor and webhooks behind the endpoint) and counts them. */
function circuitObserver(
  logger: Logger,
  metrics: Metrics | undefined,
  circuits: Pick<RedisCircuitLog, 'changed'>,
  nowMs: () => number,
): (endpoint: string, change: CircuitChange) => void {
  const count = metrics ? breakerObserver(metrics) : undefined;
  // The open circuits the operator views show; losing one write only hides it there.
  // The views show the receiver origin: they are per webhook, whose vendor they show already.
  const share = (origin: string, change: CircuitChange) => {
    const now = nowMs();
    const view =
      change.state === 'open'
        ? { state: 'open' as const, reason: change.reason, endpoint: origin, openedAtMs: now, probeAtMs: now + change.openForMs }
        : change.state === 'half_open'
          ? { state: 'half_open' as const, reason: 'probing', endpoint: origin, openedAtMs: now, probeAtMs: now }
          : undefined;
    circuits.changed(change.webhookIds, view, now).catch((error: Error) => logger.debug({ err: error.message }, 'circuit state not shared'));
  };
  return (endpoint, change) => {
    count?.(endpoint, change);
    const { vendorId, origin } = endpointParts(endpoint);
    share(origin, change);
    const fields = { endpoint: origin, vendorId, webhookIds: change.webhookIds };
    if (change.state === 'open') {
      logger.warn(
        { event: 'circuit.opened', ...fields, reason: change.reason, openForMs: change.openForMs },
        'circuit opened: deliveries to this endpoint are held back, and attempts that come due meanwhile are recorded as circuit_open',
      );
    } else if (change.state === 'closed') {
      logger.warn({ event: 'circuit.closed', ...fields }, 'circuit closed: a probe was answered; deliveries to this endpoint flow again');
    } else logger.debug({ event: 'circuit.half_open', ...fields }, 'circuit half-open: probing');
  };
}

/** Publishes every finished attempt to the live feed (`hookline deliveries tail`), which costs nothing while nobody listens. */
function feedObserver(feed: Pick<RedisAttemptFeed, 'publish'>): (outcome: FinishedOutcome) => void {
  return (outcome) => {
    if (outcome.kind !== 'attempted') return;
    const { job } = outcome;
    const entry: FeedEntry = {
      at: new Date(outcome.endedAtMs).toISOString(),
      vendor_id: job.vendorId,
      webhook_id: job.webhookId,
      event_type: job.eventType,
      event_id: job.eventId,
      delivery_id: job.deliveryId,
      attempt: outcome.attempt,
      outcome: outcome.outcome,
      status_code: outcome.statusCode ?? null,
      duration_ms: Math.round(outcome.durationMs),
      decision: outcome.decision,
    };
    feed.publish(entry);
  };
}

/** Counts every finished attempt into its webhook's stats (the store decides what counts as sent). */
function statsObserver(stats: EndpointStatsRecorder): (outcome: FinishedOutcome) => void {
  return (o) => {
    if (o.kind !== 'attempted') return;
    const { outcome, statusCode, startedAtMs, endedAtMs, durationMs } = o;
    stats.observe({ webhookId: o.job.webhookId, outcome, statusCode, startedAtMs, endedAtMs, durationMs });
  };
}

/** The delivery sender's options for a worker of these settings. */
function senderOptions(settings: Pick<WorkerSettings, 'allowPrivateTargets' | 'deliveryTimeoutMs' | 'concurrency'>) {
  return {
    allowPrivateTargets: settings.allowPrivateTargets,
    connectTimeoutMs: Math.min(5_000, settings.deliveryTimeoutMs),
    maxResponseBytes: 64 * 1024,
    snippetBytes: 4 * 1024,
    userAgent: `Hookline/${VERSION}`,
    connections: Math.max(10, settings.concurrency),
  };
}

/** What the delivery processors of one process run on: sender, breakers, send slots, storage gate and stores. */
function composeDeliveryDeps(stores: Stores, settings: Omit<WorkerSettings, 'workerConnection' | 'lockDurationMs'>) {
  const nowMs = settings.nowMs ?? Date.now;
  const sender = new HttpSender(senderOptions(settings));
  const breakerOptions = { ...DEFAULT_BREAKER_OPTIONS, attemptTimeoutMs: settings.deliveryTimeoutMs, ...settings.breaker };
  const breakers = new EndpointBreakers(breakerOptions, circuitObserver(settings.logger, settings.metrics, stores.circuits, nowMs));
  // Endpoints that never answered or were slow lately may hold at most a fifth of the slots.
  const slots = new SendSlots(settings.concurrency, Math.max(1, Math.floor(settings.concurrency / 5)));
  const gate = new StorageGate(
    () => pingRedis(stores.redis, 1_000),
    (open) => {
      settings.metrics?.sendsPaused.set(open ? 0 : 1);
      if (open) settings.logger.info({ event: 'delivery.sends_resumed' }, 'storage answers again: delivery sends resumed');
      else
        settings.logger.warn(
          { event: 'delivery.sends_paused' },
          'storage unreachable: no new delivery sends until it answers; attempts in flight may be sent again after it',
        );
    },
  );
  // The connection tells first: sends stop the moment it drops, before any record fails.
  const onClose = () => gate.close();
  const onReady = () => gate.check();
  stores.redis.on('close', onClose);
  stores.redis.on('ready', onReady);
  const flow = new EndpointFlow(stores.endpointFlow, randomUUID(), nowMs, settings.metrics ? flowObserver(settings.metrics) : undefined);
  // Pauses other workers set reach this one at once; losing the subscription only delays them to
  // when this worker next meets the endpoint afresh.
  const listening = new AbortController();
  stores.endpointFlow
    .listen((endpoint, untilMs) => flow.heard(endpoint, untilMs), listening.signal)
    .catch((error: Error) => settings.logger.debug({ err: error.message }, 'endpoint pauses not heard'));
  flow.start();
  const wakeups = new DeferralWakeups(
    breakers,
    (refs) => stores.queues.promote(refs),
    nowMs,
    undefined,
    // An endpoint held back only by the slots takes them all back at once, as before it had a limit.
    (endpoint) => (flow.limitOf(endpoint) >= slots.total ? Infinity : flow.room(endpoint)),
    { free: () => slots.suspectFree(), freed: () => slots.suspectFreed() },
  );
  const observers = [
    settings.metrics ? deliveryObserver(settings.metrics) : undefined,
    feedObserver(stores.attemptFeed),
    statsObserver(stores.endpointStats),
    settings.onOutcome,
  ].filter((o) => o !== undefined);
  const deps: DeliveryProcessorDeps = {
    webhooks: stores.webhookCopies.add(
      new CachedWebhookSource(
        stores.webhooks,
        settings.webhookCacheTtlMs === undefined ? stores.webhookCopies.ttlMs : () => settings.webhookCacheTtlMs!,
        nowMs,
      ),
    ),
    sender,
    recorder: stores.deliveryLog,
    singles: stores.queues,
    breakers,
    slots,
    gate,
    wakeups,
    holds: stores.pauseHolds,
    flow,
    sendRate: countedSendRate(new RedisSendRate(stores.redis, stores.keys), settings.metrics),
    endpointMemory: new RedisEndpointMemory(stores.redis, stores.keys),
    logger: settings.logger,
    retryScheduleMs: settings.retryScheduleMs,
    deliveryTimeoutMs: settings.deliveryTimeoutMs,
    sustainedFailureMs: settings.sustainedFailureWindowMs,
    batchHoldMs: breakerOptions.slowAfterMs,
    suspectHoldMs: Math.min(250, breakerOptions.slowAfterMs),
    circuitHoldMs: breakerOptions.openMs,
    nowMs,
    random: Math.random,
    onOutcome: (outcome) => {
      for (const observe of observers) observe(outcome);
    },
  };
  const detach = () => {
    listening.abort();
    flow.stop();
    gate.stop();
    stores.redis.off('close', onClose);
    stores.redis.off('ready', onReady);
  };
  return { deps, sender, breakers, flow, slots, gate, detach };
}

/** The delivery worker of one process over the shared stores. */
function composeWorker(stores: Stores, settings: WorkerSettings) {
  const { deps, sender, breakers, flow, slots, gate, detach } = composeDeliveryDeps(stores, settings);
  const processBatch = createBatchProcessor(deps);
  const processSingle = createSingleProcessor(deps);
  const { operationalWebhook } = settings;
  // The operator set this URL, unlike vendors' callback URLs: it is trusted, and usually on the
  // platform's private network, so the SSRF guard does not apply to it (a sender of its own).
  const operationalSender = operationalWebhook && new HttpSender({ ...senderOptions(settings), allowPrivateTargets: true, connections: 2 });
  const operationalProcessor =
    operationalSender &&
    operationalWebhook &&
    createOperationalProcessor({
      sender: operationalSender,
      target: operationalWebhook,
      retryScheduleMs: settings.retryScheduleMs,
      timeoutMs: settings.deliveryTimeoutMs,
      logger: settings.logger,
      nowMs: deps.nowMs,
      random: deps.random,
    });
  const fifo = new FifoDriver({
    lines: stores.fifoLines,
    deps,
    partitions: stores.queues.partitions.length,
    leaseMs: fifoLeaseMs(settings.deliveryTimeoutMs, settings.lockDurationMs ?? 30_000),
    linesMax: settings.concurrency,
    ...(settings.metrics ? { onHeadBlocked: fifoObserver(settings.metrics) } : {}),
  });
  const pool = new DeliveryWorkerPool({
    connection: settings.workerConnection,
    keys: stores.keys,
    partitions: stores.queues.partitions.length,
    concurrency: settings.concurrency,
    batchProcessor: processBatch,
    singleProcessor: processSingle,
    replayer: stores.replayer,
    ...(operationalProcessor ? { operationalProcessor } : {}),
    logger: settings.logger,
    lockDurationMs: settings.lockDurationMs ?? 30_000,
  });
  return {
    pool,
    fifo,
    breakers,
    flow,
    slots,
    gate,
    /** The job processors the pool runs (tests call them with jobs of their own). */
    processBatch,
    processSingle,
    async close(graceMs: number) {
      detach();
      const startedMs = Date.now();
      const [pooled, lined] = await Promise.all([pool.close(graceMs), fifo.close(graceMs)]);
      let result = pooled === 'drained' && lined === 'drained' ? pooled : ('forced' as const);
      // Attempts a batch handed off go on after their job completed; their outcome is recorded too.
      let timer: NodeJS.Timeout | undefined;
      const left = Math.max(0, graceMs - (Date.now() - startedMs));
      const idle = await Promise.race([slots.idle().then(() => true), new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), left)))]);
      clearTimeout(timer);
      if (!idle) result = 'forced';
      // Requests still in flight past the grace period are abandoned: their jobs run again elsewhere.
      await Promise.all([sender.close(idle ? undefined : 0), operationalSender?.close(0)]);
      return result;
    },
  };
}

/** The delivery worker of a process: its BullMQ pool, breakers, send slots and storage gate. */
export type DeliveryWorker = ReturnType<typeof composeWorker>;

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
  worker?: Pick<WorkerSettings, 'breaker' | 'webhookCacheTtlMs' | 'onOutcome'>;
  /** Where the vendor portal's built browser app is; default the package's `dist/portal/`. */
  portalAssetsDir?: string;
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
  /** Resolves true when its Redis answers. */
  isReady(): Promise<boolean>;
  /**
   * Starts listening (when asked), the worker and the ingest-stream consumer; answers where it
   * listens. Logs nothing: the caller writes the process's start-up line (see `startupLine`).
   */
  start(): Promise<{ api?: string; health?: string }>;
  /**
   * Stops in order (API; stream consumer; worker, whose attempts in flight get `graceMs`; queues;
   * connections) and always returns within `graceMs` plus SHUTDOWN_SLACK_MS, whatever Redis is
   * doing: a step that needs Redis gets a moment, and connections are dropped rather than left
   * reconnecting. `forced` when attempts were still in flight past the grace period.
   */
  close(graceMs?: number): Promise<'drained' | 'forced'>;
}

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
    let timer: NodeJS.Timeout | undefined;
    const ms = Math.max(0, Math.min(SHUTDOWN_STEP_MS, this.endsAtMs - Date.now()));
    await Promise.race([work.catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
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

/**
 * Logs a Redis outage once when the first of the process's connections fails and once when every
 * connection that failed is back, however many connections (and reconnect attempts) there are.
 * Every connection must be watched: ioredis prints an error event nobody listens to as a raw stack
 * trace on stderr, outside the JSON log.
 */
function outageLog(logger: Logger, redisUrl: string) {
  const down = new Set<string>();
  const redis = redisUrlForLog(redisUrl);
  let sinceMs = 0;
  return {
    watch(connection: Redis, name: string): void {
      connection.on('error', (error: Error) => {
        if (down.has(name)) return;
        down.add(name);
        if (down.size > 1) return;
        sinceMs = Date.now();
        logger.warn({ event: 'redis.unreachable', redis, connection: name, err: error.message }, 'Redis connection lost; retrying in the background');
      });
      connection.on('ready', () => {
        if (!down.delete(name) || down.size > 0) return;
        logger.info({ event: 'redis.restored', redis, downForMs: Date.now() - sinceMs }, 'Redis connection restored');
      });
    },
  };
}

/**
 * Listens without Fastify's line per address (one for each network interface on 0.0.0.0): the
 * process's start-up line names where it listens.
 */
async function quietListen(server: AdminServer | HealthServer, host: string, port: number): Promise<string> {
  const level = server.log.level;
  server.log.level = 'warn';
  try {
    return await server.listen({ host, port });
  } finally {
    server.log.level = level;
  }
}

/** Runs `start` until it succeeds (Redis may be down at start-up), every 2 s; stops trying once `stopped()`. */
function startWhenRedisAnswers(what: string, start: () => Promise<void>, logger: Logger, stopped: () => boolean, attempt = 1): void {
  start().catch((error: Error) => {
    if (stopped()) return;
    // An outage is logged by the connection watcher; anything else (an ACL refusing XGROUP, say) here.
    if (attempt === 1 && !isRedisUnavailable(error)) logger.warn({ err: error.message }, `${what} cannot start yet; retrying every 2 s`);
    setTimeout(() => startWhenRedisAnswers(what, start, logger, stopped, attempt + 1), 2_000).unref();
  });
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
  if (!tools && config.secretKey === undefined) throw new Error(`a ${role} engine needs the secret key of webhook secrets`);

  // 1. Connections: the application's (auto-pipelined, failing fast so requests answer 503), BullMQ's
  // queues' and, in a worker, BullMQ's workers' (both waiting out an outage). The CLI's tools fail fast everywhere.
  const name = `hookline-${role}`;
  const redis = connectRedis(config.redisUrl, { connectionName: name, maxRetriesPerRequest: tools ? 3 : 2 });
  const queueConnection = connectRedis(config.redisUrl, { connectionName: `${name}-queues`, maxRetriesPerRequest: tools ? 3 : null, autoPipelining: false });
  const workerConnection = runsWorker
    ? connectRedis(config.redisUrl, { connectionName: 'hookline-worker-jobs', maxRetriesPerRequest: null, autoPipelining: false })
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
  if (metrics) {
    metrics.buildInfo.set({ version: VERSION }, 1);
    initialiseSeries(metrics);
  }
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
    ...(config.operationalWebhook ? { operationalWebhooks: { logger } } : {}),
    nowMs,
  });

  // 3. The worker (and the ingest-stream consumer that runs beside it).
  const worker =
    runsWorker && workerConnection
      ? composeWorker(stores, {
          workerConnection,
          logger,
          concurrency: config.workerConcurrency,
          retryScheduleMs: config.retryScheduleMs,
          deliveryTimeoutMs: config.deliveryTimeoutMs,
          allowPrivateTargets: config.allowPrivateTargets,
          sustainedFailureWindowMs: config.sustainedFailureWindowMs,
          lockDurationMs: config.workerLockDurationMs,
          ...(metrics ? { metrics } : {}),
          ...(config.operationalWebhook ? { operationalWebhook: config.operationalWebhook } : {}),
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

  // 4. The servers: the admin API, a health server (a worker's, or the API's /metrics on a port of its own); none listens yet.
  const collect = metrics
    ? scrapeCollector(metrics, {
        queueCounts: () => stores.queues.counts(),
        ping: isReady,
        circuitsOpen: () => worker?.breakers.openEndpoints(nowMs()).length ?? 0,
        fifoLines: () => stores.fifoLines.linesWaiting(),
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
    scraped && (role === 'worker' || (runsApi && !config.metricsOnApiPort)) ? await buildHealthServer({ logger, isReady, metrics: scraped }) : undefined;

  let closing = false;
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
      if (api) {
        // Load the listing's in-memory index now rather than on the first request (in the background:
        // with Redis down at start, the API still starts, answers /readyz 503, and recovers by itself).
        void stores.machines.refresh().catch((error: Error) => {
          if (!isRedisUnavailable(error)) logger.warn({ err: error.message }, 'machine index not loaded yet; the first listing will load it');
        });
        if (options.listen) addresses.api = await quietListen(api, config.apiHost, config.apiPort);
      }
      if (health && options.listen) addresses.health = await quietListen(health, config.apiHost, config.metricsPort);
      if (worker) {
        worker.pool.start();
        worker.fifo.start();
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
      if (worker) {
        await steps.run(Promise.all(streams.map((stream) => stream.stop())));
        ended = await worker.close(graceMs);
        logger.info({ ended }, ended === 'drained' ? 'in-flight deliveries finished' : 'grace period over; unfinished deliveries return to the queue');
      }
      // After the worker: the counts of its last attempts are in the buffer.
      await steps.run(stores.endpointStats.close());
      await steps.run(health?.close());
      stores.machines.close();
      await steps.run(stores.queues.close());
      await Promise.all([redis, queueConnection, ...(workerConnection ? [workerConnection] : [])].map((connection) => steps.closeConnection(connection)));
      return ended;
    },
  };
}

/** The send-rate limiter, its answers counted (`hookline_rate_limit_checks_total`) when there are metrics. */
function countedSendRate(limiter: SendRateLimiter, metrics: Metrics | undefined): SendRateLimiter {
  if (metrics === undefined) return limiter;
  return {
    take: async (webhookId, ratePerSecond) => {
      const grant = await limiter.take(webhookId, ratePerSecond);
      metrics.rateLimitChecks.inc({ result: grant.sent ? 'sent' : 'deferred' });
      return grant;
    },
  };
}
