/**
 * What a process is assembled from: every store and service over one Redis (shared by the API, the
 * worker and the CLI's tools), and what the delivery processors run on. Building them is all this
 * does: nothing here listens, consumes or starts a timer of its own accord, except the delivery
 * deps' flow control and storage gate, which the worker detaches when it closes.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { AdminDeps } from '../admin/server.js';
import { DEFAULT_BREAKER_OPTIONS, type BreakerOptions } from '../delivery/endpoints/breaker.js';
import type { EgressProxy } from '../delivery/outbound/egress-proxy.js';
import { HttpSender } from '../delivery/outbound/http-sender.js';
import type { DeliveryProcessorDeps, FinishedOutcome } from '../delivery/attempt.js';
import { operationalWebhookQueuer } from '../delivery/operational.js';
import { DeliveryQueues } from '../delivery/queue.js';
import { DeadLetterReplayer } from '../tasks/replay.js';
import { PauseHolds } from '../delivery/pause-holds.js';
import { partitionOf } from '../delivery/jobs.js';
import { EndpointAdmission } from '../delivery/endpoints/admission.js';
import { EndpointRegistry } from '../delivery/endpoints/registry.js';
import { SendSlots } from '../delivery/endpoints/send-slots.js';
import { StorageGate } from '../delivery/storage-gate.js';
import { TestEventSender } from '../tasks/test-event.js';
import { DeferralWakeups } from '../delivery/endpoints/wakeups.js';
import { EndpointFlow } from '../delivery/endpoints/flow.js';
import { CachedWebhookSource } from '../delivery/webhook-cache.js';
import { IngestFilters } from '../ingest/filters.js';
import { CachedSubscriptions } from '../ingest/subscriptions.js';
import { Ingestor } from '../ingest/ingest.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import {
  breakerObserver,
  connectionObserver,
  receiverTokenObserver,
  deliveryObserver,
  flowObserver,
  ingestObserver,
  sendRateObserver,
  storageGateObserver,
} from '../metrics/observers.js';
import { RedisPortalSessions } from '../store/portal-sessions.js';
import { RedisApiKeyStore } from '../store/api-keys.js';
import { RedisAttemptFeed } from '../store/attempt-feed.js';
import { RedisCircuitLog } from '../store/circuits.js';
import { RedisDeliveryLog } from '../store/delivery-log.js';
import { RedisEventDedupe } from '../store/event-dedupe.js';
import { RedisEndpointStats } from '../store/endpoint-stats.js';
import { RedisEndpointMemory } from '../store/endpoints.js';
import { RedisFifoLines } from '../store/fifo-lines.js';
import { RedisHeldDeliveries } from '../store/held-deliveries.js';
import { RedisEndpointFlow } from '../store/endpoint-flow.js';
import { redisKeys } from '../store/keys.js';
import { RedisRecentEvents } from '../store/recent-events.js';
import { DEFAULT_RETENTION_MS, RedisEventLog } from '../store/event-log.js';
import { RangeReplayer } from '../tasks/range-replay.js';
import { RetentionPass } from '../tasks/retention.js';
import { Eraser } from '../tasks/erasure.js';
import { RedisMachineStore } from '../store/machines.js';
import { OperatorViews } from '../store/operator-views.js';
import { RedisEventBudget, RedisRequestCounter } from '../store/rate-limiter.js';
import { RedisReadModelFeed } from '../store/read-model-feed.js';
import { createAgentStatusStore, createTaskStore } from '../store/read-models.js';
import { pingRedis, type Redis } from '../store/redis.js';
import { RedisReplayTasks } from '../store/replay-tasks.js';
import { RedisSendRate, type SendRateLimiter } from '../store/send-rate.js';
import { SecretBox } from '../store/secret-box.js';
import { RedisTokenCache } from '../store/receiver-tokens.js';
import { ReceiverTokens } from '../delivery/outbound/receiver-tokens.js';
import { RedisWebhookChanges } from '../store/webhook-changes.js';
import { RedisReplayQueue } from '../store/replay-queue.js';
import { RedisWebhookStore } from '../store/webhooks.js';
import { VERSION } from '../version.js';
import { circuitObserver, egressProxyObserver, feedObserver, statsObserver, tracingObserver } from './observers.js';
import type { Tracing } from '../domain/trace.js';
import { webhookCopyCaches } from './webhook-copies.js';

/** How long a range replay's run stays to count its replays' outcomes after queueing them all. */
const RANGE_REPLAY_SETTLE_MAX_MS = 10 * 60_000;
/** A range replay whose run stopped without ending this often (its worker died, or the run failed) is given up. */
const REPLAY_TRIES_MAX = 5;
/**
 * The package's `dist/portal/`, which `npm run build` writes. This module runs from `src/engine/`
 * (tsx) or `dist/engine/` (built): the package root is two folders up either way.
 */
const PORTAL_ASSETS_DIR = fileURLToPath(new URL('../../dist/portal/', import.meta.url));

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
  /** HOOKLINE_MAX_EVENT_BYTES: ingest rejects a webhook event larger than this as delivered; absent: no limit. */
  maxEventBytes?: number;
  /** How long payloads, the event log and delivery records are kept (HOOKLINE_RETENTION); default 7 days. */
  retentionMs?: number;
  /** HOOKLINE_EVENT_LOG: false, and ingest keeps no event log (no feed, no range replays); default true. */
  eventLog?: boolean;
  /** HOOKLINE_INGEST_STREAMS (erasure looks through each stream's dead letters); default 1. */
  ingestStreams?: number;
  /** HOOKLINE_REPLAY_COUNT_MAX: events of a range one count reads at most. */
  replayCountMax: number;
  /** HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND: events of ranges one vendor's counts read per second at most (0: off). */
  replayCountBudgetPerSecond: number;
  /** HOOKLINE_REPLAY_RUNNING_MAX and HOOKLINE_REPLAY_QUEUED_MAX: one vendor's range replays running, and held. */
  replayRunningMax: number;
  replayQueuedMax: number;
  /** How long an erasure waits for attempts in flight before its second pass; default 35 s. */
  erasureSettleMs?: number;
  /** When given, ingest counts batches into it and logs one line per batch. */
  observability?: { metrics: Metrics; logger: Logger };
  /**
   * When given (HOOKLINE_OPERATIONAL_WEBHOOK_URL is set), each disable the engine makes and each
   * re-enable of such a webhook queues an operational webhook, whichever process makes the change.
   */
  operationalWebhooks?: { logger: Logger };
  /** Spans of ingest calls (trace export on). */
  tracing?: Tracing;
  nowMs?: () => number;
}

/** Every store and service of the engine over one Redis: what the API, the worker and the CLI's tools share. */
export function composeStores(settings: StoreSettings) {
  const nowMs = settings.nowMs ?? Date.now;
  const { redis } = settings;
  const keys = redisKeys(settings.redisPrefix);
  const fifoLines = new RedisFifoLines(
    redis,
    keys,
    (webhookId) => partitionOf(webhookId, settings.queuePartitions),
    settings.queuePartitions,
  );
  const queues = new DeliveryQueues({
    connection: settings.queueConnection,
    keys,
    partitions: settings.queuePartitions,
    retryScheduleMs: settings.retryScheduleMs,
    lines: fifoLines,
    nowMs,
    ...(settings.retentionMs === undefined ? {} : { retentionMs: settings.retentionMs }),
    // Connection trouble is logged once per outage by the connection watcher; this keeps BullMQ quiet.
    onError: (error) => settings.observability?.logger.debug({ err: error.message }, 'delivery queue error'),
  });
  const webhookCopies = webhookCopyCaches(new RedisWebhookChanges(redis, keys), settings.observability?.logger);
  const pauseHolds = new PauseHolds({ index: new RedisHeldDeliveries(redis, keys), queues, lines: fifoLines, nowMs });
  const secretBox = new SecretBox(settings.secretKey);
  const webhooks = new RedisWebhookStore(
    redis,
    keys,
    secretBox,
    () => new Date(nowMs()),
    settings.secretRotationOverlapMs,
    settings.operationalWebhooks && operationalWebhookQueuer(queues, settings.operationalWebhooks.logger),
    webhookCopies.tell,
    (webhookId) => pauseHolds.release(webhookId),
  );
  const tasks = createTaskStore(redis, keys);
  const agents = createAgentStatusStore(redis, keys);
  const machines = new RedisMachineStore(redis, keys);
  const retentionMs = settings.retentionMs ?? DEFAULT_RETENTION_MS;
  const deliveryLog = new RedisDeliveryLog(redis, keys, { retentionMs, deadLetterRetentionMs: retentionMs });
  const eventLog = new RedisEventLog(redis, keys, retentionMs);
  const retention = new RetentionPass({
    webhooks,
    log: eventLog,
    history: deliveryLog,
    streams: {
      redis,
      keys: [
        ...Array.from({ length: settings.ingestStreams ?? 1 }, (_, n) => keys.events.deadOf(n)),
        ...Array.from({ length: settings.queuePartitions }, (_, n) => keys.firstAttempts.failedOf(n)),
      ],
    },
    nowMs,
    ...(settings.observability ? { logger: settings.observability.logger } : {}),
  });
  const replayTasks = new RedisReplayTasks(redis, keys, tasks, (refs) => deliveryLog.progressOf(refs), nowMs);
  const replayer = new DeadLetterReplayer({ history: deliveryLog, queues, tasks, replayTasks, nowMs });
  const replayQueue = new RedisReplayQueue(redis, keys, {
    runningMax: settings.replayRunningMax,
    heldMax: settings.replayQueuedMax,
    triesMax: REPLAY_TRIES_MAX,
  });
  const rangeReplayer = new RangeReplayer({
    queue: replayQueue,
    log: eventLog,
    countLimits: {
      readMax: settings.replayCountMax,
      budgetPerSecond: settings.replayCountBudgetPerSecond,
      budget: new RedisEventBudget(redis, keys, keys.replayCountWindow),
    },
    history: deliveryLog,
    queues,
    tasks,
    replayTasks,
    nowMs,
    settleForMs: Math.min(
      settings.retryScheduleMs.reduce((sum, ms) => sum + ms, 0),
      RANGE_REPLAY_SETTLE_MAX_MS,
    ),
  });
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
  const apiKeys = new RedisApiKeyStore(redis, keys);
  const eraser = new Eraser({
    redis,
    keys,
    webhooks,
    eventLog,
    queues,
    lines: fifoLines,
    apiKeys,
    portalSessions,
    replayQueue,
    tasks,
    ingestStreams: settings.ingestStreams ?? 1,
    settleMs: settings.erasureSettleMs ?? 35_000,
    nowMs,
    ...(settings.observability ? { logger: settings.observability.logger } : {}),
  });
  const ingestor = new Ingestor({
    dedupe,
    readModels: new RedisReadModelFeed(redis, keys.readModels.projection),
    subscriptions: webhookCopies.add(new CachedSubscriptions(webhooks, webhookCopies.ttlMs, nowMs)),
    deliveries: queues,
    filters: webhookCopies.add(new IngestFilters(webhooks, webhookCopies.ttlMs, nowMs)),
    recentEvents,
    ...(settings.eventLog === false ? {} : { eventLog }),
    nowMs,
    ...(settings.observability
      ? { observe: ingestObserver(settings.observability.metrics, settings.observability.logger) }
      : {}),
    ...(settings.tracing === undefined ? {} : { tracing: settings.tracing }),
    ...(settings.maxEventBytes === undefined ? {} : { eventBytesMax: settings.maxEventBytes }),
  });
  return {
    redis,
    keys,
    apiKeys,
    webhooks,
    tasks,
    eraser,
    agents,
    machines,
    deliveryLog,
    eventLog,
    /** Whether ingest keeps the event log (HOOKLINE_EVENT_LOG), where journaled attempts' compact records live. */
    eventLogKept: settings.eventLog !== false,
    rangeReplayer,
    replayQueue,
    retention,
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
    secretBox,
    receiverTokenCache: new RedisTokenCache(redis, keys, secretBox),
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
        retryScheduleMs: settings.retryScheduleMs,
        portalAssetsDir: portalAssetsDir ?? PORTAL_ASSETS_DIR,
        ...(rateLimitPerSecond
          ? { rateLimit: { counter: new RedisRequestCounter(redis, keys), perSecond: rateLimitPerSecond, nowMs } }
          : {}),
        ...(ingestRateLimitPerSecond
          ? {
              ingestRateLimit: {
                budget: new RedisEventBudget(redis, keys),
                perSecond: ingestRateLimitPerSecond,
                nowMs,
              },
            }
          : {}),
        ...(unauthenticatedRateLimitPerSecond
          ? {
              addressRateLimit: {
                counter: new RedisRequestCounter(redis, keys, keys.addressRateWindow),
                perSecond: unauthenticatedRateLimitPerSecond,
                nowMs,
              },
            }
          : {}),
        apiKeys: this.apiKeys,
        webhooks,
        nowMs,
        // A cancel of a range replay still waiting takes it out of the replays' queue too.
        tasks: { view: (taskId: string) => replayTasks.view(taskId), cancel: rangeReplayer.cancel.bind(rangeReplayer) },
        agents,
        machines,
        ingestor,
        deliveries: { history: deliveryLog, replayer, testEvents },
        operator: { views: operatorViews, history: deliveryLog, replayer },
        portal: { sessions: portalSessions, publicUrl, ...(listenAddress === undefined ? {} : { listenAddress }) },
        stats: { stats: endpointStats, circuits, lines: fifoLines, flow: endpointFlow },
        recentEvents,
        eventLog,
        eventLogOn: settings.eventLog !== false,
        rangeReplayer,
        eraser,
      };
    },
  };
}

export type Stores = ReturnType<typeof composeStores>;

/** What the delivery processors of one process are tuned by (a worker's settings without its pool's). */
export interface DeliverySettings {
  logger: Logger;
  concurrency: number;
  /** TLS sessions kept for resumption (HOOKLINE_TLS_SESSION_CACHE); default 10,000. */
  tlsSessionCache?: number;
  retryScheduleMs: readonly number[];
  deliveryTimeoutMs: number;
  allowPrivateTargets: boolean;
  sustainedFailureWindowMs: number;
  /** How long a worker trusts its cached copy of a webhook. */
  webhookCacheTtlMs?: number;
  /** CA certificates (PEM) the sender trusts besides Node's (tests; deployments set NODE_EXTRA_CA_CERTS). */
  extraCa?: string;
  /** HOOKLINE_EGRESS_PROXY: deliveries and token requests go through it (not the operational webhook). */
  egressProxy?: EgressProxy;
  /** Circuit-breaker tuning; defaults in DEFAULT_BREAKER_OPTIONS. */
  breaker?: Partial<BreakerOptions>;
  /** A killed worker's in-flight jobs run again after this (HOOKLINE_WORKER_LOCK_DURATION); default 30 s. */
  lockDurationMs?: number;
  /** Counts attempts, outcomes and circuit changes. */
  metrics?: Metrics;
  onOutcome?: (outcome: FinishedOutcome) => void;
  /** Spans of attempts and of the steps that send nothing (trace export on). */
  tracing?: Tracing;
  nowMs?: () => number;
}

/** How long a killed worker's work waits before others take it over: its jobs' locks, its FIFO leases' floor. */
export function lockDurationMsOf(settings: Pick<DeliverySettings, 'lockDurationMs'>): number {
  return settings.lockDurationMs ?? 30_000;
}

/** The delivery sender's options for a worker of these settings. */
export function senderOptions(
  settings: Pick<
    DeliverySettings,
    'allowPrivateTargets' | 'deliveryTimeoutMs' | 'concurrency' | 'tlsSessionCache' | 'extraCa'
  >,
) {
  return {
    ...(settings.tlsSessionCache === undefined ? {} : { tlsSessions: settings.tlsSessionCache }),
    ...(settings.extraCa === undefined ? {} : { extraCa: settings.extraCa }),
    allowPrivateTargets: settings.allowPrivateTargets,
    connectTimeoutMs: Math.min(5_000, settings.deliveryTimeoutMs),
    maxResponseBytes: 64 * 1024,
    snippetBytes: 4 * 1024,
    userAgent: `Hookline/${VERSION}`,
    connections: Math.max(10, settings.concurrency),
  };
}

/** What the delivery processors of one process run on: sender, endpoints and their admission, send slots, storage gate and stores. */
export function composeDeliveryDeps(stores: Stores, settings: DeliverySettings) {
  const nowMs = settings.nowMs ?? Date.now;
  const sender = new HttpSender({
    ...senderOptions(settings),
    ...(settings.egressProxy === undefined
      ? {}
      : {
          egressProxy: settings.egressProxy,
          onEgressProxyUnreachable: egressProxyObserver(settings.logger, nowMs),
        }),
    ...(settings.metrics ? { onConnected: connectionObserver(settings.metrics) } : {}),
  });
  const breakerOptions = {
    ...DEFAULT_BREAKER_OPTIONS,
    attemptTimeoutMs: settings.deliveryTimeoutMs,
    ...settings.breaker,
  };
  const circuitChanged = circuitObserver(settings.logger, stores.circuits, nowMs);
  const countCircuit = settings.metrics && breakerObserver(settings.metrics);
  const endpoints = new EndpointRegistry(
    {
      options: breakerOptions,
      onStateChange: (endpoint, change) => {
        countCircuit?.(endpoint, change);
        circuitChanged(endpoint, change);
      },
    },
    nowMs,
  );
  // Endpoints that never answered or were slow lately may hold at most a fifth of the slots.
  const slots = new SendSlots(settings.concurrency, Math.max(1, Math.floor(settings.concurrency / 5)));
  const countGate = settings.metrics && storageGateObserver(settings.metrics);
  const gate = new StorageGate(
    () => pingRedis(stores.redis, 1_000),
    (open) => {
      countGate?.(open);
      if (open)
        settings.logger.info({ event: 'delivery.sends_resumed' }, 'storage answers again: delivery sends resumed');
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
  const flow = new EndpointFlow(
    endpoints,
    stores.endpointFlow,
    randomUUID(),
    nowMs,
    settings.metrics ? flowObserver(settings.metrics) : undefined,
    // A host's limit over every vendor's endpoint on it starts at the slots, as an endpoint's does.
    slots.total,
  );
  // Pauses other workers set reach this one at once; losing the subscription only delays them to
  // when this worker next meets the endpoint afresh.
  const listening = new AbortController();
  stores.endpointFlow
    .listen((endpoint, untilMs) => flow.heard(endpoint, untilMs), listening.signal)
    .catch((error: Error) => settings.logger.debug({ err: error.message }, 'endpoint pauses not heard'));
  flow.start();
  const wakeups = new DeferralWakeups(
    endpoints,
    // Jobs are moved to the front of their queue; FIFO lines are made due.
    async (refs) => {
      const lines = refs.filter((ref) => ref.line === true);
      await Promise.all([
        stores.queues.promote(lines.length === 0 ? refs : refs.filter((ref) => ref.line !== true)),
        lines.length === 0
          ? undefined
          : stores.fifoLines.wakeLines(
              lines.map((ref) => ref.jobId),
              nowMs(),
            ),
      ]);
    },
    nowMs,
    undefined,
    // An endpoint held back only by the slots takes them all back at once, as before it had a limit.
    (endpoint) => (flow.limitOf(endpoint) >= slots.total ? Infinity : flow.room(endpoint)),
    { free: () => slots.suspectFree(), freed: () => slots.suspectFreed() },
  );
  const suspectHoldMs = Math.min(250, breakerOptions.slowAfterMs);
  const circuitHoldMs = breakerOptions.openMs;
  const admission = new EndpointAdmission({
    endpoints,
    flow,
    slots,
    gate,
    sendRate: observedSendRate(
      new RedisSendRate(stores.redis, stores.keys),
      settings.metrics && sendRateObserver(settings.metrics),
    ),
    endpointMemory: new RedisEndpointMemory(stores.redis, stores.keys),
    suspectHoldMs,
    // A delivery held back behind an endpoint that has not proven itself comes back by itself after
    // the lock duration (or once the contact in flight has ended, if later); the wakeups bring it
    // back as soon as the endpoint answers in time. The hold only matters when this process dies
    // before it wakes them: they then run again when everything else it held does, not later.
    rules: { circuitHoldMs, unprovenHoldMs: lockDurationMsOf(settings) },
    nowMs,
    random: Math.random,
  });
  const observers = [
    settings.metrics ? deliveryObserver(settings.metrics) : undefined,
    feedObserver(stores.attemptFeed),
    statsObserver(stores.endpointStats),
    settings.onOutcome,
    settings.tracing === undefined ? undefined : tracingObserver(settings.tracing, nowMs),
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
    receiverTokens: new ReceiverTokens({
      cache: stores.receiverTokenCache,
      sender,
      // Tokens are kept per client: a change of URL, credentials, scope or audience means another token.
      clientIdOf: (auth) =>
        stores.secretBox.opaqueId(
          'oauth2 client',
          JSON.stringify([
            auth.tokenUrl,
            auth.clientId,
            auth.clientSecret,
            auth.scope,
            auth.audience,
            auth.tokenAuthMethod,
          ]),
        ),
      nowMs,
      timeoutMs: settings.deliveryTimeoutMs,
      ...(settings.metrics ? { onRequested: receiverTokenObserver(settings.metrics) } : {}),
    }),
    recorder: stores.deliveryLog,
    singles: stores.queues,
    admission,
    gate,
    wakeups,
    holds: stores.pauseHolds,
    logger: settings.logger,
    retryScheduleMs: settings.retryScheduleMs,
    deliveryTimeoutMs: settings.deliveryTimeoutMs,
    sustainedFailureMs: settings.sustainedFailureWindowMs,
    batchHoldMs: breakerOptions.slowAfterMs,
    suspectHoldMs,
    nowMs,
    random: Math.random,
    onOutcome: (outcome) => {
      for (const observe of observers) observe(outcome);
    },
    ...(settings.tracing === undefined ? {} : { tracing: settings.tracing }),
  };
  const detach = () => {
    listening.abort();
    flow.stop();
    gate.stop();
    stores.redis.off('close', onClose);
    stores.redis.off('ready', onReady);
  };
  return { deps, sender, endpoints, flow, slots, gate, detach };
}

/** The send-rate limiter, each answer told to `observe` (which counts `hookline_rate_limit_checks_total`) when there are metrics. */
function observedSendRate(limiter: SendRateLimiter, observe: ((sent: boolean) => void) | undefined): SendRateLimiter {
  if (observe === undefined) return limiter;
  return {
    take: async (webhookId, ratePerSecond) => {
      const grant = await limiter.take(webhookId, ratePerSecond);
      observe(grant.sent);
      return grant;
    },
  };
}
