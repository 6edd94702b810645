import { formatDurationMs } from '../lib/duration.js';
import { redisUrlForLog } from '../config/redis-url.js';
import type { RedisEndpoint } from '../embedded/defaults.js';
import type { EngineConfig, EngineRole } from '../engine/index.js';
import { VERSION } from '../version.js';

/** The one line a serving process writes once it runs. */
export interface StartupLine {
  /** `warn` when the SSRF guard is off: a production process must not run that way unnoticed. */
  level: 'info' | 'warn';
  fields: Record<string, unknown>;
  msg: string;
}

/**
 * What an operator must know about a process that just started: its role and version, where it
 * listens (and where its /metrics are), which Redis it uses (never with credentials), whether the SSRF guard is on, and the
 * delivery settings a worker runs with.
 */
export function startupLine(input: {
  role: Exclude<EngineRole, 'tools'>;
  config: EngineConfig;
  redis: Pick<RedisEndpoint, 'url' | 'origin'>;
  addresses: { api?: string; health?: string };
}): StartupLine {
  const { role, config, addresses } = input;
  const worker = role === 'all' || role === 'worker';
  const embedded = input.redis.origin !== 'configured';
  // Where Prometheus scrapes this process: its health server's port when it has one.
  const metrics =
    addresses.health !== undefined
      ? `${addresses.health}/metrics`
      : addresses.api !== undefined
        ? `${addresses.api}/metrics`
        : undefined;
  const fields: Record<string, unknown> = {
    event: 'hookline.started',
    role,
    version: VERSION,
    ...(addresses.api === undefined ? {} : { api: addresses.api }),
    ...(addresses.health === undefined ? {} : { health: addresses.health }),
    ...(metrics === undefined ? {} : { metrics }),
    redis: redisUrlForLog(input.redis.url),
    redisSource: embedded ? 'embedded' : 'REDIS_URL',
    ...(embedded ? { dataDir: config.dataDir } : {}),
    redisPrefix: config.redisPrefix,
    ssrfGuard: config.allowPrivateTargets ? 'off' : 'on',
    // Where spans go (origin and path only: an endpoint's query or credentials are not logged).
    traces: config.tracing === undefined ? 'off' : `${tracesTarget(config.tracing.url)} (${config.tracing.protocol})`,
    ...(worker
      ? {
          workerConcurrency: config.workerConcurrency,
          partitions: config.queuePartitions,
          retrySchedule: config.retryScheduleMs.map(formatDurationMs).join(','),
          attempts: config.retryScheduleMs.length,
          deliveryTimeout: formatDurationMs(config.deliveryTimeoutMs),
          ingestStream: config.ingestStream,
        }
      : {}),
  };
  const parts: string[] = [];
  if (addresses.api !== undefined)
    parts.push(`Hookline API listening on ${addresses.api} (docs at ${addresses.api}/docs)`);
  if (worker) parts.push('delivery worker running');
  if (addresses.health !== undefined) parts.push(`health and metrics on ${addresses.health}`);
  if (config.allowPrivateTargets)
    parts.push(
      'SSRF guard OFF (HOOKLINE_ALLOW_PRIVATE_TARGETS=true): callbacks may target private and loopback addresses',
    );
  return { level: config.allowPrivateTargets ? 'warn' : 'info', fields, msg: parts.join('; ') };
}

function tracesTarget(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
  } catch {
    return 'the configured endpoint';
  }
}
