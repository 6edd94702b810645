/**
 * A process's stores (see composeStores) from its configuration, and their part in its lifecycle:
 * the webhook change feed starts first, the endpoint stats buffer is flushed after the worker's last
 * attempts, and the queues and the machine index close just before the connections.
 */
import type { Tracing } from '../domain/trace.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Redis } from '../store/redis.js';
import { composeStores } from './assembly.js';
import type { EngineConfig } from './index.js';
import type { Lifecycle } from './lifecycle.js';

/** The stores of one process over its connections (the CLI's tools: no metrics, no tracing, no change feed). */
export function storesOf(
  config: EngineConfig,
  on: {
    redis: Redis;
    queueConnection: Redis;
    logger: Logger;
    metrics: Metrics | undefined;
    tracing: Tracing | undefined;
    nowMs: () => number;
    tools: boolean;
  },
  lifecycle: Lifecycle,
) {
  const { metrics, logger, tracing } = on;
  const stores = composeStores({
    ...(metrics ? { observability: { metrics, logger } } : {}),
    redis: on.redis,
    queueConnection: on.queueConnection,
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
    nowMs: on.nowMs,
  });
  // The change feed keeps this process's copies of webhooks current (the CLI's tools keep none), until shutdown begins.
  if (!on.tools)
    lifecycle.add({
      name: 'webhook change feed',
      phase: 'foundation',
      start: ({ stopping, whenRedisAnswers }) => whenRedisAnswers(() => stores.webhookCopies.listen(stopping)),
    });
  lifecycle.add({ name: 'queues', phase: 'foundation', stop: () => stores.queues.close() });
  lifecycle.add({ name: 'machine index', phase: 'foundation', stop: () => stores.machines.close() });
  // First in the work phase, so it stops after the worker: the counts of its last attempts are in the buffer.
  lifecycle.add({ name: 'endpoint stats buffer', phase: 'work', stop: () => stores.endpointStats.close() });
  return stores;
}
