import { pino } from 'pino';
import { composeWorker, type WorkerSettings } from '../../src/compose.js';
import type { FinishedOutcome } from '../../src/delivery/processor.js';
import { connectRedis } from '../../src/store/redis.js';
import type { TestApp } from './app.js';

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
