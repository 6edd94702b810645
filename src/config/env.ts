import { parseEgressProxyUrl, type EgressProxyAddress } from './egress-proxy-url.js';
import { isIP } from 'node:net';
import { homedir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { parseDurationMs } from '../lib/duration.js';
import { parseRedisUrl } from './redis-url.js';
import { tracingConfigFrom, type TracingConfig } from './otel.js';

const DEFAULT_RETRY_SCHEDULE = '0s,5s,5m,30m,2h,5h,10h,14h,20h,24h';

const duration = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((text, ctx) => {
      const ms = parseDurationMs(text);
      if (ms === undefined) {
        ctx.addIssue({ code: 'custom', message: `expected a duration such as 500ms, 15s, 5m or 2h (got "${text}")` });
        return z.NEVER;
      }
      return ms;
    });

const port = (fallback: number) =>
  z.coerce
    .number({ message: 'expected a port number' })
    .int('expected an integer port')
    .min(0, 'expected a port between 0 and 65535')
    .max(65535, 'expected a port between 0 and 65535')
    .default(fallback);

const boolean = (fallback: boolean) =>
  z
    .enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'expected true or false' })
    .default(fallback ? 'true' : 'false')
    .transform((v) => v === 'true' || v === '1' || v === 'yes');

/** Why `text` cannot be the address browsers reach the API at, or undefined when it can. */
function publicUrlProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'expected an absolute http(s) URL such as https://hooks.example.com';
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'expected an http or https URL';
  if (url.search || url.hash || url.username || url.password)
    return 'expected a URL without query, fragment or credentials';
  return undefined;
}

/** The names proxy-addr (Fastify's trustProxy) gives to ranges: 127.0.0.0/8 and ::1, 169.254.0.0/16 and fe80::/10, RFC 1918 and fc00::/7. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];

/** Whether `entry` names proxies Fastify can trust: an IP address, a CIDR range, or a range's name. */
function isProxyEntry(entry: string): boolean {
  if (PROXY_RANGE_NAMES.includes(entry)) return true;
  const [address = '', bits, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  return bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128));
}

/** The environment variables Hookline reads, with defaults; docs/configuration.md's table and .env.example mirror it. */
export const envSchema = z.object({
  REDIS_URL: z
    .string()
    .trim()
    .min(1)
    .superRefine((v, ctx) => {
      const parsed = parseRedisUrl(v);
      if (!parsed.ok) ctx.addIssue({ code: 'custom', message: parsed.reason });
    })
    .optional(),
  HOOKLINE_REDIS_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,32}$/, 'expected 1-32 letters, digits, dots, dashes or underscores')
    .default('hl'),
  HOOKLINE_API_HOST: z.string().trim().min(1).default('127.0.0.1'),
  HOOKLINE_API_PORT: port(8080),
  HOOKLINE_PUBLIC_URL: z
    .string()
    .trim()
    .superRefine((v, ctx) => {
      const problem = publicUrlProblem(v);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .transform((v) => v.replace(/\/+$/, ''))
    .optional(),
  HOOKLINE_TRUST_PROXY: z
    .string()
    .transform((text, ctx) => {
      const entries = text
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== '');
      const bad = entries.find((entry) => !isProxyEntry(entry));
      if (bad !== undefined) {
        ctx.addIssue({
          code: 'custom',
          message: `"${bad}" is not a proxy address; expected comma-separated IP addresses or CIDR ranges (10.0.0.0/8), or loopback, linklocal, uniquelocal`,
        });
        return z.NEVER;
      }
      return entries;
    })
    .optional(),
  HOOKLINE_METRICS_PORT: port(9464),
  HOOKLINE_METRICS_ON_API_PORT: boolean(true),
  HOOKLINE_SECRET_KEY: z
    .string()
    .trim()
    .refine(
      (v) => Buffer.from(v, 'base64').length === 32,
      'expected 32 random bytes written in base64 (openssl rand -base64 32)',
    )
    .optional(),
  HOOKLINE_ALLOW_PRIVATE_TARGETS: boolean(false),
  HOOKLINE_WORKER_CONCURRENCY: z.coerce
    .number({ message: 'expected an integer' })
    .int('expected an integer')
    .min(1, 'expected at least 1')
    .max(10_000, 'expected at most 10000')
    .default(50),
  HOOKLINE_TLS_SESSION_CACHE: z.coerce
    .number({ message: 'expected an integer' })
    .int('expected an integer')
    .min(0, 'expected 0 or more')
    .max(1_000_000, 'expected at most 1000000')
    .default(10_000),
  HOOKLINE_EGRESS_PROXY: z
    .string()
    .trim()
    .transform((text, ctx) => {
      if (text === '') return undefined;
      try {
        return parseEgressProxyUrl(text);
      } catch (error) {
        // The message never quotes the value: it may hold the proxy's password.
        ctx.addIssue({ code: 'custom', message: (error as Error).message });
        return z.NEVER;
      }
    })
    .optional(),
  HOOKLINE_RETRY_SCHEDULE: z
    .string()
    .default(DEFAULT_RETRY_SCHEDULE)
    .transform((text, ctx) => {
      const parts = text.split(',').map((p) => p.trim());
      const delays = parts.map(parseDurationMs);
      const bad = parts.find((_, i) => delays[i] === undefined);
      if (bad !== undefined || parts.length > 50) {
        ctx.addIssue({
          code: 'custom',
          message:
            bad !== undefined
              ? `"${bad}" is not a duration; expected a comma-separated list such as ${DEFAULT_RETRY_SCHEDULE}`
              : 'expected at most 50 attempts',
        });
        return z.NEVER;
      }
      return delays as number[];
    }),
  HOOKLINE_DELIVERY_TIMEOUT: duration('15s'),
  HOOKLINE_QUEUE_PARTITIONS: z.coerce
    .number({ message: 'expected an integer' })
    .int('expected an integer')
    .min(1, 'expected at least 1')
    .max(256, 'expected at most 256')
    .default(4),
  HOOKLINE_SECRET_ROTATION_OVERLAP: duration('24h'),
  HOOKLINE_SUSTAINED_FAILURE_WINDOW: duration('5d'),
  // A re-sent event id is promised to be a no-op for at least 24 h (docs/api.md "Ingest").
  HOOKLINE_DEDUPE_WINDOW: duration('48h').refine(
    (ms) => ms >= 24 * 3_600_000,
    'expected at least 24h (re-sent events are ignored for at least that long)',
  ),
  // How long event payloads, the event log and delivery records (dead letters too) are kept.
  // Whole minutes from 1m: installations that keep payloads only until they are delivered ask for minutes.
  HOOKLINE_RETENTION: duration('7d')
    .refine((ms) => ms >= 60_000 && ms % 60_000 === 0, 'expected whole minutes, at least 1m')
    .refine((ms) => ms <= 366 * 24 * 3_600_000, 'expected at most 366d'),
  // false: no event log (no event feed, no range replays), for installations whose rate would make it too large.
  HOOKLINE_EVENT_LOG: boolean(true),
  HOOKLINE_SHUTDOWN_GRACE: duration('30s'),
  HOOKLINE_WORKER_LOCK_DURATION: duration('30s'),
  HOOKLINE_INGEST_STREAM: boolean(true),
  HOOKLINE_INGEST_STREAMS: z.coerce
    .number({ message: 'expected an integer' })
    .int('expected an integer')
    .min(1, 'expected at least 1')
    .max(64, 'expected at most 64')
    .default(1),
  HOOKLINE_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  HOOKLINE_LOG_FORMAT: z.enum(['auto', 'json', 'pretty'], { message: 'expected auto, json or pretty' }).default('auto'),
  // Unset: the per-user state folder (defaultDataDir), the same whatever folder a command runs in.
  HOOKLINE_DATA_DIR: z.string().trim().min(1).optional(),
  HOOKLINE_EMBEDDED_REDIS_PORT: port(0),
  HOOKLINE_RATE_LIMIT_PER_SECOND: z.coerce
    .number({ message: 'expected a whole number of requests' })
    .int('expected a whole number of requests')
    .min(0, 'expected 0 (off) or more')
    .default(100),
  // A browser opening a link or a client whose key was revoked makes a few such requests; a flood of
  // guesses makes thousands.
  HOOKLINE_UNAUTHENTICATED_RATE_LIMIT_PER_SECOND: z.coerce
    .number({ message: 'expected a whole number of requests' })
    .int('expected a whole number of requests')
    .min(0, 'expected 0 (off) or more')
    .default(10),
  // One engine ingests about 6,600 events/s and delivers about 2,000/s: the default never holds a
  // single producer below what an engine can deliver.
  HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: z.coerce
    .number({ message: 'expected a whole number of events' })
    .int('expected a whole number of events')
    .min(0, 'expected 0 (off) or more')
    .default(10_000),
  // 1 MiB, the limit receivers commonly have; at most the ingest request's own 5 MiB.
  HOOKLINE_MAX_EVENT_BYTES: z.coerce
    .number({ message: 'expected a number of bytes' })
    .int('expected an integer number of bytes')
    .min(1024, 'expected at least 1024 bytes')
    .max(5 * 1024 * 1024, 'expected at most 5 MiB (the largest ingest request)')
    .default(1024 * 1024),
  // A range count (a replay's dry run) costs Redis 3-5 µs per event of the range it reads: one count
  // reads at most this many (answering a lower bound past it)…
  HOOKLINE_REPLAY_COUNT_MAX: z.coerce
    .number({ message: 'expected a whole number of events' })
    .int('expected a whole number of events')
    .min(100, 'expected at least 100')
    .max(1_000_000, 'expected at most 1000000')
    .default(10_000),
  // …and one vendor's counts read at most this many per second (about 50 ms of Redis at the default).
  HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND: z.coerce
    .number({ message: 'expected a whole number of events' })
    .int('expected a whole number of events')
    .min(0, 'expected 0 (off) or more')
    .default(10_000),
  // Range replays of one vendor running at once (each holds a worker's replay slot while it runs,
  // and sends a delivery per event), and accepted but not ended, waiting or running.
  HOOKLINE_REPLAY_RUNNING_MAX: z.coerce
    .number({ message: 'expected a whole number of replays' })
    .int('expected a whole number of replays')
    .min(1, 'expected at least 1')
    .max(1_000, 'expected at most 1000')
    .default(2),
  HOOKLINE_REPLAY_QUEUED_MAX: z.coerce
    .number({ message: 'expected a whole number of replays' })
    .int('expected a whole number of replays')
    .min(1, 'expected at least 1')
    .max(10_000, 'expected at most 10000')
    .default(10),
  HOOKLINE_API_BODY_LIMIT_BYTES: z.coerce
    .number({ message: 'expected a number of bytes' })
    .int('expected an integer number of bytes')
    .min(1024, 'expected at least 1024 bytes')
    .max(64 * 1024 * 1024, 'expected at most 64 MiB')
    .default(1024 * 1024),
  HOOKLINE_OPERATIONAL_WEBHOOK_URL: z
    .string()
    .trim()
    .superRefine((v, ctx) => {
      const problem = operationalUrlProblem(v);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
    })
    .optional(),
  HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: z
    .string()
    .trim()
    .refine(
      // Standard Webhooks: the part after the prefix is the base64 HMAC key.
      (v) => /^whsec_[A-Za-z0-9+/]+={0,2}$/.test(v) && Buffer.from(v.slice('whsec_'.length), 'base64').length >= 16,
      'expected a Standard Webhooks secret: whsec_ followed by base64 of at least 16 random bytes (echo "whsec_$(openssl rand -base64 32)")',
    )
    .optional(),
  // OpenTelemetry trace export: the standard variables, read as they are by every SDK (see config/otel.ts).
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z.string().optional(),
  OTEL_EXPORTER_OTLP_PROTOCOL: z.string().optional(),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: z.string().optional(),
  OTEL_EXPORTER_OTLP_HEADERS: z.string().optional(),
  OTEL_EXPORTER_OTLP_TRACES_HEADERS: z.string().optional(),
  OTEL_SERVICE_NAME: z.string().optional(),
  OTEL_TRACES_SAMPLER: z.string().optional(),
  OTEL_TRACES_SAMPLER_ARG: z.string().optional(),
  OTEL_TRACES_EXPORTER: z.string().optional(),
  OTEL_SDK_DISABLED: z.string().optional(),
});

/** Why `text` cannot be the operational webhook URL, or undefined when it can. */
function operationalUrlProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'expected an absolute http(s) URL';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'expected an http or https URL';
  // Credentials in a URL end up in logs and proxies: the signature is how the receiver trusts a request.
  if (url.username !== '' || url.password !== '')
    return 'must not contain credentials (the receiver checks the signature instead)';
  if (url.hash !== '') return 'must not contain a fragment';
  return undefined;
}

/**
 * The rules between variables, each naming the variable to fix and why. Checked once every variable
 * parsed on its own, so a message never speaks of a value that was itself invalid.
 */
function crossFieldProblems(e: z.infer<typeof envSchema>): { variable: string; message: string }[] {
  const problems: { variable: string; message: string }[] = [];
  if (e.HOOKLINE_OPERATIONAL_WEBHOOK_URL !== undefined && e.HOOKLINE_OPERATIONAL_WEBHOOK_SECRET === undefined) {
    problems.push({
      variable: 'HOOKLINE_OPERATIONAL_WEBHOOK_SECRET',
      message:
        'required when HOOKLINE_OPERATIONAL_WEBHOOK_URL is set: operational webhooks are always signed, so their receiver can tell them from forgeries',
    });
  }
  if (e.HOOKLINE_REPLAY_RUNNING_MAX > e.HOOKLINE_REPLAY_QUEUED_MAX) {
    problems.push({
      variable: 'HOOKLINE_REPLAY_RUNNING_MAX',
      message: `expected at most HOOKLINE_REPLAY_QUEUED_MAX (${e.HOOKLINE_REPLAY_QUEUED_MAX}): the replays a vendor holds, running ones included`,
    });
  }
  const tracing = tracingConfigFrom(e);
  if (Array.isArray(tracing)) problems.push(...tracing);
  return problems;
}

export interface Config {
  /** Unset: `hookline start` runs an embedded local redis-server. `redis+cluster://…` names a Redis Cluster. */
  readonly redisUrl: string | undefined;
  readonly redisPrefix: string;
  readonly apiHost: string;
  readonly apiPort: number;
  /** Where browsers reach the API (portal links start with it); unset: the API's listen address, when that is loopback. */
  readonly publicUrl: string | undefined;
  /**
   * The proxies whose X-Forwarded-For and X-Forwarded-Proto the API believes (addresses, CIDR ranges
   * or range names); empty: none, so a request's address and protocol are its connection's.
   */
  readonly trustProxy: readonly string[];
  /** A worker's health server: `/healthz`, `/readyz`, `/metrics`; the API's too when `metricsOnApiPort` is false. */
  readonly metricsPort: number;
  /** Serve `/metrics` on the API port (true), or on `metricsPort` only, so the API port can be published without it. */
  readonly metricsOnApiPort: boolean;
  /** AES-256-GCM key for webhook secrets at rest; resolved by the CLI for the embedded default. */
  readonly secretKey: Buffer | undefined;
  readonly allowPrivateTargets: boolean;
  readonly workerConcurrency: number;
  /** TLS sessions a worker keeps to resume connections to receivers (0: none). */
  readonly tlsSessionCache: number;
  /** Every delivery and token request leaves through this HTTP proxy (CONNECT to the checked address); undefined: direct. */
  readonly egressProxy: EgressProxyAddress | undefined;
  readonly retryScheduleMs: readonly number[];
  readonly deliveryTimeoutMs: number;
  /** Delivery queues (each its own hash tag, so Redis Cluster spreads them); webhooks hash onto them. */
  readonly queuePartitions: number;
  /** How long a replaced webhook secret keeps signing beside the new one. */
  readonly secretRotationOverlapMs: number;
  /** A webhook whose every attempt failed for this long is disabled. */
  readonly sustainedFailureWindowMs: number;
  /** How long an ingested event id is remembered (re-sends within it are duplicates). */
  readonly dedupeWindowMs: number;
  /** How long payloads, the event log and delivery records are kept (a webhook's `retention` may shorten it). */
  readonly retentionMs: number;
  /** Whether ingest keeps each webhook's event log (the event feed, range replays). */
  readonly eventLog: boolean;
  /** How long SIGTERM waits for in-flight attempts. */
  readonly shutdownGraceMs: number;
  /** How long a worker's claim on a job lasts unrenewed: a killed worker's deliveries run again after it. */
  readonly workerLockDurationMs: number;
  /** Consume the ingest Redis streams (in processes that run the worker). */
  readonly ingestStream: boolean;
  /** Ingest streams producers may append to: the first `{<prefix>:ingest}:events`, then `{<prefix>:ingest:<n>}:events`, each its own hash tag. */
  readonly ingestStreams: number;
  readonly logLevel: z.infer<typeof envSchema>['HOOKLINE_LOG_LEVEL'];
  /** `auto`: pretty in a terminal, JSON lines otherwise. */
  readonly logFormat: 'auto' | 'json' | 'pretty';
  /** The embedded Redis's data, its state file and the generated secret key; an absolute path. */
  readonly dataDir: string;
  readonly embeddedRedisPort: number;
  readonly apiBodyLimitBytes: number;
  /** A webhook event larger than this as delivered (its envelope's JSON) is rejected at ingest. */
  readonly maxEventBytes: number;
  /** Events of a range one count (a dry run) reads at most; past it the count answers a lower bound. */
  readonly replayCountMax: number;
  /** Events of ranges one vendor's counts read per second at most (0: no limit). */
  readonly replayCountBudgetPerSecond: number;
  /** Range replays of one vendor running at once, at most. */
  readonly replayRunningMax: number;
  /** Range replays of one vendor accepted and not ended (waiting or running), at most. */
  readonly replayQueuedMax: number;
  /** Admin API requests per second per API key (0: no limit); event ingest is exempt. */
  readonly rateLimitPerSecond: number;
  /** Events ingested over HTTP per second per API key (0: no limit). */
  readonly ingestRateLimitPerSecond: number;
  /** Requests per second per client address that authenticate nothing: no key, a bad key or cookie, a link being opened (0: no limit). */
  readonly unauthenticatedRateLimitPerSecond: number;
  /**
   * Where `webhook.disabled` and `webhook.recovered` notices go, and the whsec_ secret that signs
   * them; undefined: none are sent.
   */
  readonly operationalWebhook: { readonly url: string; readonly secret: string } | undefined;
  /** OpenTelemetry trace export (the OTEL_* variables); undefined: off, and none of it is loaded. */
  readonly tracing: TracingConfig | undefined;
}

/**
 * The per-user state folder Hookline keeps the embedded Redis in when HOOKLINE_DATA_DIR is unset,
 * so every command finds the same data whatever folder it runs in: `$XDG_STATE_HOME/hookline`, or
 * `~/.local/state/hookline` (the XDG default); `%LOCALAPPDATA%\hookline` on Windows.
 */
export function defaultDataDir(env: NodeJS.ProcessEnv, platform: NodeJS.Platform = process.platform): string {
  const home = env.HOME || homedir();
  if (platform === 'win32') return path.join(env.LOCALAPPDATA || path.join(home, 'AppData', 'Local'), 'hookline');
  // The XDG spec ignores a relative XDG_STATE_HOME.
  const stateHome =
    env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : path.join(home, '.local', 'state');
  return path.join(stateHome, 'hookline');
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Parses the environment once; throws ConfigError naming every bad variable and why. */
export function loadConfig(env: NodeJS.ProcessEnv): Config {
  // Empty strings mean "unset", as in most .env loaders.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.') || '(environment)'}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  const problems = crossFieldProblems(e);
  if (problems.length > 0) {
    throw new ConfigError(`Invalid configuration:\n${problems.map((p) => `  ${p.variable}: ${p.message}`).join('\n')}`);
  }
  return Object.freeze({
    redisUrl: e.REDIS_URL,
    redisPrefix: e.HOOKLINE_REDIS_PREFIX,
    apiHost: e.HOOKLINE_API_HOST,
    apiPort: e.HOOKLINE_API_PORT,
    publicUrl: e.HOOKLINE_PUBLIC_URL,
    trustProxy: Object.freeze([...(e.HOOKLINE_TRUST_PROXY ?? [])]),
    metricsPort: e.HOOKLINE_METRICS_PORT,
    metricsOnApiPort: e.HOOKLINE_METRICS_ON_API_PORT,
    secretKey: e.HOOKLINE_SECRET_KEY === undefined ? undefined : Buffer.from(e.HOOKLINE_SECRET_KEY, 'base64'),
    allowPrivateTargets: e.HOOKLINE_ALLOW_PRIVATE_TARGETS,
    workerConcurrency: e.HOOKLINE_WORKER_CONCURRENCY,
    tlsSessionCache: e.HOOKLINE_TLS_SESSION_CACHE,
    egressProxy: e.HOOKLINE_EGRESS_PROXY,
    retryScheduleMs: Object.freeze([...e.HOOKLINE_RETRY_SCHEDULE]),
    deliveryTimeoutMs: e.HOOKLINE_DELIVERY_TIMEOUT,
    queuePartitions: e.HOOKLINE_QUEUE_PARTITIONS,
    secretRotationOverlapMs: e.HOOKLINE_SECRET_ROTATION_OVERLAP,
    sustainedFailureWindowMs: e.HOOKLINE_SUSTAINED_FAILURE_WINDOW,
    dedupeWindowMs: e.HOOKLINE_DEDUPE_WINDOW,
    retentionMs: e.HOOKLINE_RETENTION,
    eventLog: e.HOOKLINE_EVENT_LOG,
    shutdownGraceMs: e.HOOKLINE_SHUTDOWN_GRACE,
    workerLockDurationMs: e.HOOKLINE_WORKER_LOCK_DURATION,
    ingestStream: e.HOOKLINE_INGEST_STREAM,
    ingestStreams: e.HOOKLINE_INGEST_STREAMS,
    logLevel: e.HOOKLINE_LOG_LEVEL,
    logFormat: e.HOOKLINE_LOG_FORMAT,
    dataDir: path.resolve(e.HOOKLINE_DATA_DIR ?? defaultDataDir(env)),
    embeddedRedisPort: e.HOOKLINE_EMBEDDED_REDIS_PORT,
    apiBodyLimitBytes: e.HOOKLINE_API_BODY_LIMIT_BYTES,
    maxEventBytes: e.HOOKLINE_MAX_EVENT_BYTES,
    replayCountMax: e.HOOKLINE_REPLAY_COUNT_MAX,
    replayCountBudgetPerSecond: e.HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND,
    replayRunningMax: e.HOOKLINE_REPLAY_RUNNING_MAX,
    replayQueuedMax: e.HOOKLINE_REPLAY_QUEUED_MAX,
    rateLimitPerSecond: e.HOOKLINE_RATE_LIMIT_PER_SECOND,
    ingestRateLimitPerSecond: e.HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND,
    unauthenticatedRateLimitPerSecond: e.HOOKLINE_UNAUTHENTICATED_RATE_LIMIT_PER_SECOND,
    operationalWebhook:
      e.HOOKLINE_OPERATIONAL_WEBHOOK_URL === undefined || e.HOOKLINE_OPERATIONAL_WEBHOOK_SECRET === undefined
        ? undefined
        : Object.freeze({ url: e.HOOKLINE_OPERATIONAL_WEBHOOK_URL, secret: e.HOOKLINE_OPERATIONAL_WEBHOOK_SECRET }),
    // Checked with the rules between variables above: an array here cannot happen.
    tracing: tracingSettings(e),
  });
}

function tracingSettings(e: z.infer<typeof envSchema>): TracingConfig | undefined {
  const tracing = tracingConfigFrom(e);
  return Array.isArray(tracing) ? undefined : tracing;
}
