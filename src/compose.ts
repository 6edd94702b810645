import type { AdminDeps } from './admin/server.js';
import { DEFAULT_BREAKER_OPTIONS, EndpointBreakers, type BreakerOptions, type CircuitChange } from './delivery/breaker.js';
import { HttpSender } from './delivery/http-sender.js';
import { createBatchProcessor, createDeliveryProcessor, type DeliveryProcessorDeps, type FinishedOutcome } from './delivery/processor.js';
import { DeliveryQueues } from './delivery/queue.js';
import { DeadLetterReplayer } from './delivery/replay.js';
import { SendSlots } from './delivery/send-slots.js';
import { StorageGate } from './delivery/storage-gate.js';
import { TestEventSender } from './delivery/test-event.js';
import { DeferralWakeups } from './delivery/wakeups.js';
import { CachedWebhookSource } from './delivery/webhook-cache.js';
import { DeliveryWorkerPool } from './delivery/worker.js';
import { Ingestor } from './ingest/ingest.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics/metrics.js';
import { breakerObserver, deliveryObserver, ingestObserver } from './metrics/observers.js';
import { RedisApiKeyStore } from './store/api-keys.js';
import { RedisDeliveryLog } from './store/delivery-log.js';
import { RedisEndpointMemory } from './store/endpoints.js';
import { redisKeys } from './store/keys.js';
import { RedisMachineStore } from './store/machines.js';
import { RedisEventBudget, RedisRequestCounter } from './store/rate-limiter.js';
import { createAgentStatusStore, createTaskStore } from './store/read-models.js';
import { pingRedis, type Redis } from './store/redis.js';
import { SecretBox } from './store/secret-box.js';
import { RedisWebhookStore } from './store/webhooks.js';
import { VERSION } from './version.js';

export interface StoreSettings {
  /** The application connection (auto-pipelined). */
  redis: Redis;
  /** A connection for BullMQ's queues (no auto-pipelining). */
  queueConnection: Redis;
  redisPrefix: string;
  secretKey: Buffer;
  retryScheduleMs: readonly number[];
  queuePartitions: number;
  secretRotationOverlapMs: number;
  /** How long ingest remembers an event id; default 48 h. */
  dedupeWindowMs?: number;
  /** When given, ingest counts batches into it and logs one line per batch. */
  observability?: { metrics: Metrics; logger: Logger };
  nowMs?: () => number;
}

/** Every store and service of the engine over one Redis: what the API, the worker and tests share. */
export function composeStores(settings: StoreSettings) {
  const nowMs = settings.nowMs ?? Date.now;
  const { redis } = settings;
  const keys = redisKeys(settings.redisPrefix);
  const webhooks = new RedisWebhookStore(redis, keys, new SecretBox(settings.secretKey), () => new Date(nowMs()), settings.secretRotationOverlapMs);
  const tasks = createTaskStore(redis, keys);
  const agents = createAgentStatusStore(redis, keys);
  const machines = new RedisMachineStore(redis, keys);
  const deliveryLog = new RedisDeliveryLog(redis, keys);
  const queues = new DeliveryQueues({
    connection: settings.queueConnection,
    keys,
    partitions: settings.queuePartitions,
    retryScheduleMs: settings.retryScheduleMs,
    // Connection trouble is logged once per outage by the connection watcher; this keeps BullMQ quiet.
    onError: (error) => settings.observability?.logger.debug({ err: error.message }, 'delivery queue error'),
  });
  const replayer = new DeadLetterReplayer({ history: deliveryLog, queues, tasks, nowMs });
  const testEvents = new TestEventSender({ queues, nowMs });
  const ingestor = new Ingestor({
    redis,
    keys,
    machines,
    agents,
    tasks,
    subscriptions: webhooks,
    deliveries: queues,
    nowMs,
    ...(settings.dedupeWindowMs === undefined ? {} : { dedupeTtlMs: settings.dedupeWindowMs }),
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
    replayer,
    testEvents,
    ingestor,
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
      /** Accept callback URLs on loopback and private addresses; default false (the SSRF guard). */
      allowPrivateTargets?: boolean;
    }): AdminDeps {
      const { rateLimitPerSecond, ingestRateLimitPerSecond, allowPrivateTargets, ...rest } = options;
      return {
        ...rest,
        allowPrivateTargets: allowPrivateTargets ?? false,
        ...(rateLimitPerSecond ? { rateLimit: { counter: new RedisRequestCounter(redis, keys), perSecond: rateLimitPerSecond, nowMs } } : {}),
        ...(ingestRateLimitPerSecond ? { ingestRateLimit: { budget: new RedisEventBudget(redis, keys), perSecond: ingestRateLimitPerSecond, nowMs } } : {}),
        apiKeys: this.apiKeys,
        webhooks,
        nowMs,
        tasks,
        agents,
        machines,
        ingestor,
        deliveries: { history: deliveryLog, replayer, testEvents },
      };
    },
  };
}

export type Stores = ReturnType<typeof composeStores>;

export interface WorkerSettings {
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
  onOutcome?: (outcome: FinishedOutcome) => void;
  nowMs?: () => number;
}

/** Logs a circuit's changes (open and close at warn, with the webhooks behind the endpoint) and counts them. */
function circuitObserver(logger: Logger, metrics: Metrics | undefined): (endpoint: string, change: CircuitChange) => void {
  const count = metrics ? breakerObserver(metrics) : undefined;
  return (endpoint, change) => {
    count?.(endpoint, change);
    if (change.state === 'open') {
      logger.warn(
        { event: 'circuit.opened', endpoint, reason: change.reason, openForMs: change.openForMs, webhookIds: change.webhookIds },
        'circuit opened: deliveries to this endpoint are held back, and attempts that come due meanwhile are recorded as circuit_open',
      );
    } else if (change.state === 'closed') {
      logger.warn({ event: 'circuit.closed', endpoint, webhookIds: change.webhookIds }, 'circuit closed: a probe was answered; deliveries to this endpoint flow again');
    } else logger.debug({ event: 'circuit.half_open', endpoint, webhookIds: change.webhookIds }, 'circuit half-open: probing');
  };
}

/** What the delivery processors of one process run on: sender, breakers, send slots, storage gate and stores. */
export function composeDeliveryDeps(stores: Stores, settings: Omit<WorkerSettings, 'workerConnection' | 'lockDurationMs'>) {
  const nowMs = settings.nowMs ?? Date.now;
  const sender = new HttpSender({
    allowPrivateTargets: settings.allowPrivateTargets,
    connectTimeoutMs: Math.min(5_000, settings.deliveryTimeoutMs),
    maxResponseBytes: 64 * 1024,
    snippetBytes: 4 * 1024,
    userAgent: `Hookline/${VERSION}`,
    connections: Math.max(10, settings.concurrency),
  });
  const breakerOptions = { ...DEFAULT_BREAKER_OPTIONS, attemptTimeoutMs: settings.deliveryTimeoutMs, ...settings.breaker };
  const breakers = new EndpointBreakers(breakerOptions, circuitObserver(settings.logger, settings.metrics));
  // Endpoints that never answered or were slow lately may hold at most a fifth of the slots.
  const slots = new SendSlots(settings.concurrency, Math.max(1, Math.floor(settings.concurrency / 5)));
  const gate = new StorageGate(
    () => pingRedis(stores.redis, 1_000),
    (open) => {
      settings.metrics?.sendsPaused.set(open ? 0 : 1);
      if (open) settings.logger.info({ event: 'delivery.sends_resumed' }, 'storage answers again: delivery sends resumed');
      else settings.logger.warn({ event: 'delivery.sends_paused' }, 'storage unreachable: no new delivery sends until it answers; attempts in flight may be sent again after it');
    },
  );
  // The connection tells first: sends stop the moment it drops, before any record fails.
  const onClose = () => gate.close();
  const onReady = () => gate.check();
  stores.redis.on('close', onClose);
  stores.redis.on('ready', onReady);
  const wakeups = new DeferralWakeups(breakers, (refs) => stores.queues.promote(refs), nowMs);
  const observers = [settings.metrics ? deliveryObserver(settings.metrics) : undefined, settings.onOutcome].filter((o) => o !== undefined);
  const deps: DeliveryProcessorDeps = {
    webhooks: new CachedWebhookSource(stores.webhooks, settings.webhookCacheTtlMs ?? 2_000, nowMs),
    sender,
    recorder: stores.deliveryLog,
    singles: stores.queues,
    breakers,
    slots,
    gate,
    wakeups,
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
    gate.stop();
    stores.redis.off('close', onClose);
    stores.redis.off('ready', onReady);
  };
  return { deps, sender, breakers, slots, gate, detach };
}

/** The delivery worker of one process over the shared stores. */
export function composeWorker(stores: Stores, settings: WorkerSettings) {
  const { deps, sender, breakers, slots, gate, detach } = composeDeliveryDeps(stores, settings);
  const pool = new DeliveryWorkerPool({
    connection: settings.workerConnection,
    keys: stores.keys,
    partitions: stores.queues.partitions.length,
    concurrency: settings.concurrency,
    batchProcessor: createBatchProcessor(deps),
    singleProcessor: createDeliveryProcessor(deps),
    replayer: stores.replayer,
    logger: settings.logger,
    lockDurationMs: settings.lockDurationMs ?? 30_000,
  });
  return {
    pool,
    breakers,
    slots,
    gate,
    async close(graceMs: number) {
      detach();
      const startedMs = Date.now();
      let result = await pool.close(graceMs);
      // Attempts a batch handed off go on after their job completed; their outcome is recorded too.
      let timer: NodeJS.Timeout | undefined;
      const left = Math.max(0, graceMs - (Date.now() - startedMs));
      const idle = await Promise.race([slots.idle().then(() => true), new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), left)))]);
      clearTimeout(timer);
      if (!idle) result = 'forced';
      // Requests still in flight past the grace period are abandoned: their jobs run again elsewhere.
      await sender.close(idle ? undefined : 0);
      return result;
    },
  };
}
