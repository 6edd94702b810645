import { hostname } from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { formatDurationMs } from '../lib/duration.js';
import type { Config } from '../config/env.js';
import { redisUrlForLog } from '../config/redis-url.js';
import type { RedisEndpoint } from '../embedded/defaults.js';
import type { EngineConfig, EngineRole, Stores } from '../engine/index.js';
import type { Logger } from '../logger.js';
import { RedisEngineRegistry, type EngineEntry } from '../store/engines.js';
import { redisKeys } from '../store/keys.js';
import { connectRedis, isRedisUnavailable } from '../store/redis.js';
import { SecretBox } from '../store/secret-box.js';
import { checkSecretKey } from '../store/secret-probe.js';
import { VERSION } from '../version.js';
import { CliError, redisFailureReason } from './errors.js';
import { raceTimer } from '../lib/timer-race.js';

/** How often a check that needs Redis is tried again while Redis does not answer. */
const RETRY_MS = 2_000;

/**
 * Runs `work` once Redis answers: now, or every 2 s while its error says Redis is unavailable, as
 * an engine that starts during an outage waits it out. Resolves with the answer; undefined when
 * `signal` aborts first. Any other error rejects.
 */
async function whenRedisAnswers<T>(work: () => Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  while (!signal.aborted) {
    try {
      return await work();
    } catch (error) {
      if (!(error instanceof Error) || !isRedisUnavailable(error)) throw error;
    }
    // Ends early (rejecting) when aborted; the loop then ends.
    await delay(RETRY_MS, undefined, { signal }).catch(() => undefined);
  }
  return undefined;
}

/**
 * Checks an engine's secret key against the installation's probe (see store/secret-probe.ts). When
 * Redis answers now, a key that does not fit throws a CliError (one sentence) before the engine
 * serves anything. When Redis does not answer, the engine starts as it does during any outage, and
 * the check runs once Redis answers: `later` resolves then with the sentence to stop with. It never
 * resolves for a key that fits, or once `signal` aborts. A Redis that refuses the check (it wants a
 * password) is one sentence too.
 */
export async function checkSecretKeyAtStart(
  stores: Pick<Stores, 'redis' | 'keys'>,
  base: Config,
  config: EngineConfig,
  signal: AbortSignal,
): Promise<{ later: Promise<string> }> {
  const box = new SecretBox(config.secretKey);
  const check = () => checkSecretKey(stores.redis, stores.keys, box);
  // Redis answers, but not as asked (a password it wants, an ACL): the key cannot be checked, and the engine could do nothing either.
  const unchecked = (error: Error) =>
    `cannot check the secret key against Redis at ${redisUrlForLog(config.redisUrl)} (${redisFailureReason(error)})`;
  const never = new Promise<never>(() => undefined);
  const now = await check().catch((error: Error) => {
    if (isRedisUnavailable(error)) return undefined;
    throw new CliError(unchecked(error));
  });
  if (now === 'mismatch') throw new CliError(secretKeyMismatch(base, config.redisUrl));
  if (now !== undefined) return { later: never };
  return {
    later: whenRedisAnswers(check, signal).then(
      (answer) => (answer === 'mismatch' ? secretKeyMismatch(base, config.redisUrl) : never),
      (error: Error) => unchecked(error),
    ),
  };
}

/**
 * The sentence an engine whose secret key does not open the stored secrets stops with: where the
 * key came from (HOOKLINE_SECRET_KEY, or the embedded default's file) and which Redis holds them.
 */
function secretKeyMismatch(base: Config, redisUrl: string): string {
  const source =
    base.secretKey !== undefined
      ? 'HOOKLINE_SECRET_KEY'
      : `the secret key in ${path.join(base.dataDir, 'secret.key')} (used while HOOKLINE_SECRET_KEY is unset)`;
  return (
    `${source} does not open the webhook secrets stored in ${redisUrlForLog(redisUrl)} (prefix ${base.redisPrefix}): ` +
    'they were sealed with another key; start with that one as HOOKLINE_SECRET_KEY'
  );
}

/** The settings every engine on one Redis must share, by the variable that sets each, as text (never a secret). */
function sharedSettings(config: Config): Record<string, string> {
  return {
    HOOKLINE_ALLOW_PRIVATE_TARGETS: String(config.allowPrivateTargets),
    HOOKLINE_RETRY_SCHEDULE: config.retryScheduleMs.map(formatDurationMs).join(','),
    HOOKLINE_DELIVERY_TIMEOUT: formatDurationMs(config.deliveryTimeoutMs),
    HOOKLINE_QUEUE_PARTITIONS: String(config.queuePartitions),
    HOOKLINE_SUSTAINED_FAILURE_WINDOW: formatDurationMs(config.sustainedFailureWindowMs),
    HOOKLINE_DEDUPE_WINDOW: formatDurationMs(config.dedupeWindowMs),
    HOOKLINE_RETENTION: formatDurationMs(config.retentionMs),
    HOOKLINE_EVENT_LOG: String(config.eventLog),
    HOOKLINE_SECRET_ROTATION_OVERLAP: formatDurationMs(config.secretRotationOverlapMs),
    HOOKLINE_WORKER_LOCK_DURATION: formatDurationMs(config.workerLockDurationMs),
    HOOKLINE_INGEST_STREAMS: String(config.ingestStreams),
    // Its origin only: a path may carry a token.
    HOOKLINE_OPERATIONAL_WEBHOOK_URL:
      config.operationalWebhook === undefined ? 'unset' : new URL(config.operationalWebhook.url).origin,
  };
}

/** This process as the other engines on its Redis see it. */
export function engineEntry(role: Exclude<EngineRole, 'tools'>, config: Config, api: string | undefined): EngineEntry {
  return {
    pid: process.pid,
    host: hostname(),
    role,
    version: VERSION,
    ...(api === undefined ? {} : { api }),
    startedAt: new Date().toISOString(),
    settings: sharedSettings(config),
  };
}

/** `pid 123 (hookline worker, API http://…)`, and the host when it is another. */
function describeEngine(engine: EngineEntry): string {
  const command = `hookline ${engine.role === 'all' ? 'start' : engine.role}`;
  const where = engine.host === hostname() ? '' : ` on ${engine.host}`;
  return `pid ${engine.pid}${where} (${command}${engine.api === undefined ? '' : `, API ${engine.api}`})`;
}

/** A setting whose value here differs from that of engines already running, with who runs which value. */
interface SettingDifference {
  variable: string;
  here: string;
  running: { value: string; engines: string[] }[];
}

/** The settings of `ours` that running engines have other values of (pure). */
export function settingsDiffering(ours: EngineEntry, running: readonly EngineEntry[]): SettingDifference[] {
  return Object.entries(ours.settings).flatMap(([variable, here]) => {
    const others = new Map<string, string[]>();
    for (const engine of running) {
      const value = engine.settings[variable];
      if (value === undefined || value === here) continue;
      others.set(value, [...(others.get(value) ?? []), describeEngine(engine)]);
    }
    return others.size === 0
      ? []
      : [{ variable, here, running: [...others].map(([value, engines]) => ({ value, engines })) }];
  });
}

/**
 * Records this engine among the engines running on its Redis once Redis answers, first warning (at
 * start) of every setting that differs from theirs: engines that share queues but not settings
 * deliver the same events differently depending on which takes them. leave() removes the record
 * (within a second, whatever Redis does).
 */
export function joinRunningEngines(
  stores: Pick<Stores, 'redis' | 'keys'>,
  entry: EngineEntry,
  logger: Logger,
  signal: AbortSignal,
): { leave(): Promise<void> } {
  const registry = new RedisEngineRegistry(stores.redis, stores.keys);
  const joined = whenRedisAnswers(async () => {
    const differing = settingsDiffering(entry, await registry.running());
    if (differing.length > 0) {
      const said = differing.map(
        (d) =>
          `${d.variable} is ${d.here} here, ${d.running.map((r) => `${r.value} in ${r.engines.join(' and ')}`).join('; ')}`,
      );
      logger.warn(
        { event: 'engine.settings_differ', differences: differing },
        `this engine's settings differ from those of the engines already running on this Redis: ${said.join('; ')}. Deliveries will behave differently depending on which engine takes them: give every engine the same values`,
      );
    }
    return registry.join(entry);
  }, signal).catch((error: Error) => {
    logger.warn({ err: error.message }, 'this engine could not record itself among the running engines');
    return undefined;
  });
  return {
    async leave() {
      await raceTimer(
        joined.then((registration) => registration?.leave()).catch(() => undefined),
        1_000,
        undefined,
      );
    },
  };
}

/**
 * What `hookline start` says on a data folder whose embedded Redis another process runs. One engine
 * per folder: a second `start` would depend on the first for its Redis (gone when the first stops)
 * and share its queues whatever its settings; a worker added on purpose is `hookline worker`.
 */
export async function secondStartRefusal(
  config: Config,
  endpoint: Pick<RedisEndpoint, 'url' | 'sharedWithPid'>,
): Promise<CliError> {
  const redis = connectRedis(endpoint.url, { connectionName: 'hookline-start-check', maxRetriesPerRequest: 1 });
  redis.on('error', () => undefined);
  let engines: EngineEntry[] = [];
  try {
    engines = await new RedisEngineRegistry(redis, redisKeys(config.redisPrefix)).running();
  } catch {
    // Then the state file's pid is all there is to name.
  } finally {
    redis.disconnect();
  }
  const who =
    engines.length > 0
      ? engines.map(describeEngine).join(', ')
      : `pid ${endpoint.sharedWithPid} (a hookline command: try again once it has ended)`;
  return new CliError(
    `another Hookline process runs on ${config.dataDir}: ${who}; stop it before starting another engine there, or add a delivery worker to it with \`hookline worker\``,
  );
}
