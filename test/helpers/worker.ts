import { pino } from 'pino';
import { composeWorker, type WorkerSettings } from '../../src/compose.js';
import type { FinishedOutcome } from '../../src/delivery/processor.js';
import { connectRedis } from '../../src/store/redis.js';
import { freeLoopbackPort } from '../../src/store/redis-server.js';
import type { TestApp } from './app.js';
import { cleanEnv } from './processes.js';

export interface TestWorker {
  outcomes: FinishedOutcome[];
  breakers: ReturnType<typeof composeWorker>['breakers'];
  close(): Promise<void>;
}

/** A real delivery worker on the test app's Redis and prefix (private targets allowed unless said). */
export function startTestWorker(t: TestApp, settings: Partial<Omit<WorkerSettings, 'workerConnection'>> = {}): TestWorker {
  const workerConnection = connectRedis(t.url, { connectionName: `hookline-test-worker-${t.prefix}`, maxRetriesPerRequest: null, autoPipelining: false });
  const outcomes: FinishedOutcome[] = [];
  const worker = composeWorker(t, {
    workerConnection,
    logger: pino({ level: 'silent' }),
    concurrency: 20,
    retryScheduleMs: t.queues.retryScheduleMs,
    deliveryTimeoutMs: 1_000,
    allowPrivateTargets: true,
    sustainedFailureWindowMs: 5 * 24 * 3_600_000,
    lockDurationMs: 5_000,
    webhookCacheTtlMs: 0,
    onOutcome: (o) => outcomes.push(o),
    ...settings,
  });
  worker.pool.start();
  return {
    outcomes,
    breakers: worker.breakers,
    async close() {
      await worker.close(2_000);
      await workerConnection.quit();
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
