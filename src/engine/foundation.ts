/**
 * What every part of a process runs on: its trace export and its Redis connections. Both are in the
 * lifecycle's first phase, so they stop last: the connections once nothing needs Redis any more,
 * and the trace export after them, so the spans of the final attempts are exported.
 */
import { hostname } from 'node:os';
import type { Tracing } from '../domain/trace.js';
import type { Logger } from '../logger.js';
import { connectRedis, pingRedis } from '../store/redis.js';
import { startTracing } from '../tracing/tracing.js';
import { VERSION } from '../version.js';
import type { EngineConfig, EngineRole } from './index.js';
import { outageLog, type Lifecycle } from './lifecycle.js';

/**
 * The process's trace export: `given` (tests) as it is, else the SDK, loaded only when an endpoint is
 * configured (config/otel.ts) and shut down last. The CLI's tools trace nothing.
 */
export async function traceExport(
  config: EngineConfig,
  role: EngineRole,
  given: Tracing | undefined,
  lifecycle: Lifecycle,
): Promise<Tracing | undefined> {
  if (role === 'tools') return undefined;
  if (given) return given;
  const tracing = await startTracing(config.tracing, {
    serviceVersion: VERSION,
    instanceId: `${hostname()}:${process.pid}:${role}`,
  });
  // Added before the connections, so it stops after them (bounded by the exporter's timeout too).
  if (tracing) lifecycle.add({ name: 'trace export', phase: 'foundation', stop: () => tracing.shutdown() });
  return tracing;
}

/**
 * The process's connections: the application's (auto-pipelined, failing fast so requests answer
 * 503), BullMQ's queues' and, in a worker, BullMQ's workers' (both waiting out an outage); the CLI's
 * tools fail fast everywhere. Each is watched by the outage log, and closed at shutdown.
 */
export function openConnections(config: EngineConfig, role: EngineRole, logger: Logger, lifecycle: Lifecycle) {
  const tools = role === 'tools';
  const name = `hookline-${role}`;
  const redis = connectRedis(config.redisUrl, { connectionName: name, maxRetriesPerRequest: tools ? 3 : 2 });
  const queueConnection = connectRedis(config.redisUrl, {
    connectionName: `${name}-queues`,
    maxRetriesPerRequest: tools ? 3 : null,
    autoPipelining: false,
  });
  const workerConnection =
    role === 'all' || role === 'worker'
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
  lifecycle.add({
    name: 'Redis connections',
    phase: 'foundation',
    // Each connection's QUIT is a step of its own, and the connection is dropped either way.
    boundsItself: true,
    stop: ({ steps }) =>
      Promise.all(
        [redis, queueConnection, ...(workerConnection ? [workerConnection] : [])].map((connection) =>
          steps.closeConnection(connection),
        ),
      ),
  });
  return {
    redis,
    queueConnection,
    workerConnection,
    outages,
    /** Resolves true when Redis answers. */
    isReady: () => pingRedis(redis, 1_000),
  };
}
