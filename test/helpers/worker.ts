import { readFileSync } from 'node:fs';
import type { pino } from 'pino';
import { inject } from 'vitest';
import type { FinishedOutcome } from '../../src/delivery/attempt.js';
import type { DeliveryWorker, EngineConfig, EngineOptions } from '../../src/engine/index.js';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { testEngine, type TestApp } from './app.js';
import { cleanEnv } from './processes.js';

const testCa = inject('testCa');

export interface TestWorker {
  outcomes: FinishedOutcome[];
  /** The worker engine's metrics (the text `/metrics` would serve). */
  metricsText(): Promise<string>;
  breakers: Pick<DeliveryWorker['endpoints'], 'openEndpoints'>;
  /** The worker's endpoints (and through them, their hosts). */
  endpoints: Pick<DeliveryWorker['endpoints'], 'get'>;
  flow: DeliveryWorker['flow'];
  close(): Promise<void>;
}

/** What a test sets about its worker: configuration values and the worker hooks of the engine. */
export type TestWorkerSettings = Partial<
  Pick<
    EngineConfig,
    | 'workerConcurrency'
    | 'deliveryTimeoutMs'
    | 'allowPrivateTargets'
    | 'sustainedFailureWindowMs'
    | 'workerLockDurationMs'
    | 'ingestStream'
    | 'ingestStreams'
    | 'egressProxy'
  >
> &
  NonNullable<EngineOptions['worker']> & {
    /** Where the worker logs (default: nowhere). */
    logger?: pino.Logger;
  };

/** The configuration of a worker for the test app: its Redis, prefix, secret key, schedule and partitions, and these settings. */
export function testWorkerConfig(t: TestApp, settings: TestWorkerSettings = {}): EngineConfig {
  const { breaker: _breaker, webhookCacheTtlMs: _ttl, onOutcome: _onOutcome, logger: _logger, ...config } = settings;
  return {
    ...t.config,
    workerConcurrency: 20,
    deliveryTimeoutMs: 1_000,
    allowPrivateTargets: true,
    sustainedFailureWindowMs: 5 * 24 * 3_600_000,
    workerLockDurationMs: 5_000,
    ingestStream: false,
    ...config,
  };
}

/**
 * A real delivery worker for the test app: the production assembly (an engine of role `worker`,
 * its own connections) on the app's Redis and prefix; private targets allowed unless said.
 */
export async function startTestWorker(t: TestApp, settings: TestWorkerSettings = {}): Promise<TestWorker> {
  const outcomes: FinishedOutcome[] = [];
  const engine = await testEngine(
    testWorkerConfig(t, settings),
    {
      role: 'worker',
      worker: {
        webhookCacheTtlMs: settings.webhookCacheTtlMs ?? 0,
        onOutcome: (o) => {
          outcomes.push(o);
          settings.onOutcome?.(o);
        },
        ...(settings.breaker ? { breaker: settings.breaker } : {}),
        // Receivers made by the tests serve certificates of the run's CA (the process may have
        // started before the global setup set NODE_EXTRA_CA_CERTS).
        ...(testCa === undefined ? {} : { extraCa: readFileSync(testCa.caPath, 'utf8') }),
      },
    },
    settings.logger,
  );
  await engine.start();
  return {
    outcomes,
    metricsText: async () => (await engine.metrics?.registry.metrics()) ?? '',
    breakers: engine.worker!.endpoints,
    endpoints: engine.worker!.endpoints,
    flow: engine.worker!.flow,
    async close() {
      await engine.close(2_000);
    },
  };
}

/**
 * The environment of a `hookline worker` process on the test app's Redis, prefix, secret key and
 * partitions (private targets allowed, JSON logs, its own metrics port); `extra` overrides any of it.
 * Nothing else of the caller's HOOKLINE_* environment leaks in.
 */
export async function workerProcessEnv(t: TestApp, extra: Record<string, string> = {}): Promise<NodeJS.ProcessEnv> {
  return {
    ...cleanEnv(),
    REDIS_URL: t.url,
    HOOKLINE_REDIS_PREFIX: t.prefix,
    HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
    HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
    HOOKLINE_QUEUE_PARTITIONS: String(t.queues.partitions.length),
    HOOKLINE_WORKER_CONCURRENCY: '10',
    HOOKLINE_WORKER_LOCK_DURATION: '2s',
    HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
    HOOKLINE_LOG_FORMAT: 'json',
    HOOKLINE_LOG_LEVEL: 'info',
    ...extra,
  };
}
