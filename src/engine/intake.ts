/**
 * What a process takes in beside its API: the ingest-stream consumers (beside a worker) and the read
 * models' projector. Both are in the lifecycle's last phase, so they stop before the worker, and
 * each starts once Redis answers.
 */
import { ReadModelProjector } from '../ingest/read-model-projector.js';
import { StreamIngestSource } from '../ingest/stream-source.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import { projectionObserver, streamDeadLetterObserver } from '../metrics/observers.js';
import type { Redis } from '../store/redis.js';
import type { Stores } from './assembly.js';
import type { EngineConfig } from './index.js';
import type { Lifecycle, OutageWatcher } from './lifecycle.js';

interface IntakeDeps {
  redis: Redis;
  stores: Stores;
  logger: Logger;
  metrics: Metrics | undefined;
  /** Told about each consumer's own connection, so its outages are logged. */
  outages: OutageWatcher;
  nowMs: () => number;
}

/**
 * The read models' projector, run in every process that ingests or answers lookups (not the CLI's
 * tools): an API alone (a deployment whose workers are down or elsewhere) still shows what it
 * accepted, and several processes share the stream through one consumer group. Added before the
 * stream consumers, so it stops after them: a batch they ingest while stopping still reaches it.
 */
export function readModelProjector(deps: IntakeDeps, lifecycle: Lifecycle): ReadModelProjector {
  const { stores, metrics } = deps;
  const readModels = new ReadModelProjector({
    redis: deps.redis,
    stream: stores.keys.readModels.projection,
    machines: stores.machines,
    agents: stores.agents,
    tasks: stores.tasks,
    logger: deps.logger,
    watchConnection: (connection) => deps.outages.watch(connection, 'read models'),
    ...(metrics ? { observe: projectionObserver(metrics) } : {}),
    nowMs: deps.nowMs,
  });
  lifecycle.add({
    name: 'read-model projector',
    phase: 'intake',
    start: ({ whenRedisAnswers }) => whenRedisAnswers(() => readModels.start()),
    stop: () => readModels.stop(),
  });
  return readModels;
}

/**
 * One consumer per ingest stream (HOOKLINE_INGEST_STREAM, in a worker), each blocking on a connection
 * of its own; they stop together, first after the API.
 */
export function streamConsumers(config: EngineConfig, deps: IntakeDeps, lifecycle: Lifecycle): void {
  if (!config.ingestStream) return;
  const { stores, metrics } = deps;
  const streams = Array.from(
    { length: config.ingestStreams },
    (_, n) =>
      new StreamIngestSource({
        redis: deps.redis,
        stream: stores.keys.events.streamOf(n),
        deadLetterStream: stores.keys.events.deadOf(n),
        ...(metrics ? { observeDeadLetter: streamDeadLetterObserver(metrics) } : {}),
        ingestor: stores.ingestor,
        logger: deps.logger,
        watchConnection: (connection) => deps.outages.watch(connection, `stream ${n}`),
      }),
  );
  lifecycle.add({
    name: 'ingest stream consumers',
    phase: 'intake',
    start: ({ whenRedisAnswers }) => {
      for (const stream of streams) whenRedisAnswers(() => stream.start(), 'ingest stream consumer');
    },
    stop: () => Promise.all(streams.map((stream) => stream.stop())),
  });
}
