import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { inject } from 'vitest';
import type { AdminServer } from '../../src/admin/server.js';
import { loadConfig } from '../../src/config/env.js';
import type { Role } from '../../src/domain/roles.js';
import type { ReadModelProjector } from '../../src/ingest/read-model-projector.js';
import {
  createEngine,
  type Engine,
  type EngineConfig,
  type EngineOptions,
  type Stores,
} from '../../src/engine/index.js';
import type { Redis } from '../../src/store/redis.js';
import { testRedis } from './redis.js';

export type TestApp = Stores & {
  app: AdminServer;
  redis: Redis;
  url: string;
  prefix: string;
  secretKey: Buffer;
  /** The app's configuration: a worker for it starts from this (see startTestWorker). */
  config: EngineConfig;
  /** The engine's read-model projector, started with the app (a test may stop it). */
  readModels: ReadModelProjector;
  /** Issues a real API key with these roles (and vendor) and returns it. */
  keyFor(roles: Role[], vendorId?: string): Promise<string>;
  /** Registers a webhook (EVENT_TYPE_MACHINE_CREATED) through the API, as a vendor would: its id and the vendor's key. */
  register(vendorId: string, callbackUrl: string, extra?: object): Promise<{ id: string; key: string }>;
  /** Stops the engine and deletes the prefix's keys; `keepData`: stops the engine only (a restart on the same data follows). */
  close(options?: { keepData?: boolean }): Promise<void>;
};

export interface TestAppOptions {
  bodyLimitBytes?: number;
  retryScheduleMs?: readonly number[];
  queuePartitions?: number;
  secretRotationOverlapMs?: number;
  /** Requests per second per API key (unset: no limit). */
  rateLimitPerSecond?: number;
  /** Ingested events per second per API key (unset: no limit). */
  ingestRateLimitPerSecond?: number;
  /** Requests per second per client address that authenticate nothing (unset: no limit). */
  unauthenticatedRateLimitPerSecond?: number;
  /**
   * Registration accepts callback URLs on loopback and private addresses (default true: the tests'
   * receivers listen on 127.0.0.1); false applies the SSRF guard as production does by default.
   */
  allowPrivateTargets?: boolean;
  /** Another Redis than the suite's, e.g. a `redis+cluster://` URL. */
  redisUrl?: string;
  /** A fixed key prefix instead of a fresh random one. */
  prefix?: string;
  /** Where the engine logs (default: nowhere). */
  logger?: pino.Logger;
  /** HOOKLINE_OPERATIONAL_WEBHOOK_URL and _SECRET; workers started for the app inherit them. */
  operationalWebhook?: EngineConfig['operationalWebhook'];
  /** The installation's secret key (default a fresh one): give another app's to start a second engine on its data. */
  secretKey?: Buffer;
  /** HOOKLINE_RETENTION (ms); default 7 days. */
  retentionMs?: number;
  /** HOOKLINE_EVENT_LOG; default true. */
  eventLog?: boolean;
  /** The vendor portal's built assets to serve (default: the package's dist/portal/, as in production). */
  portalAssetsDir?: string;
  /** Trace export (the OTEL_* variables' settings); workers started for the app inherit it. */
  tracing?: EngineConfig['tracing'];
}

/** An engine's configuration with its secret key, as every role but the CLI's tools has one. */
type ServingConfig = EngineConfig & { readonly secretKey: Buffer };

/**
 * A configuration for an engine on the suite's Redis: the defaults of `loadConfig`, with no request
 * limits, private targets allowed, and `overrides` on top.
 */
export function testConfig(overrides: Partial<ServingConfig> & Pick<EngineConfig, 'redisPrefix'>): ServingConfig {
  return {
    ...loadConfig({}),
    redisUrl: inject('redisUrl'),
    secretKey: randomBytes(32),
    rateLimitPerSecond: 0,
    ingestRateLimitPerSecond: 0,
    unauthenticatedRateLimitPerSecond: 0,
    allowPrivateTargets: true,
    ...overrides,
  };
}

/** An engine of `config` with a silent logger, not listening (tests inject requests). */
export function testEngine(
  config: EngineConfig,
  options: Omit<EngineOptions, 'logger'>,
  logger: pino.Logger = pino({ level: 'silent' }),
): Promise<Engine> {
  return createEngine(config, { logger, ...options });
}

/** The admin API and every store (the production assembly, role `api`) on the suite's real Redis under a fresh key prefix. */
export async function testApp(options: TestAppOptions = {}): Promise<TestApp> {
  const t = testRedis(options.redisUrl, options.prefix);
  const config = testConfig({
    redisUrl: t.url,
    redisPrefix: t.prefix,
    retryScheduleMs: options.retryScheduleMs ?? [0, 5_000, 300_000],
    queuePartitions: options.queuePartitions ?? 2,
    secretRotationOverlapMs: options.secretRotationOverlapMs ?? 24 * 3_600_000,
    ...(options.bodyLimitBytes === undefined ? {} : { apiBodyLimitBytes: options.bodyLimitBytes }),
    ...(options.rateLimitPerSecond === undefined ? {} : { rateLimitPerSecond: options.rateLimitPerSecond }),
    ...(options.ingestRateLimitPerSecond === undefined
      ? {}
      : { ingestRateLimitPerSecond: options.ingestRateLimitPerSecond }),
    ...(options.unauthenticatedRateLimitPerSecond === undefined
      ? {}
      : { unauthenticatedRateLimitPerSecond: options.unauthenticatedRateLimitPerSecond }),
    ...(options.allowPrivateTargets === undefined ? {} : { allowPrivateTargets: options.allowPrivateTargets }),
    ...(options.retentionMs === undefined ? {} : { retentionMs: options.retentionMs }),
    ...(options.eventLog === undefined ? {} : { eventLog: options.eventLog }),
    ...(options.secretKey === undefined ? {} : { secretKey: options.secretKey }),
    ...(options.operationalWebhook === undefined ? {} : { operationalWebhook: options.operationalWebhook }),
    ...(options.tracing === undefined ? {} : { tracing: options.tracing }),
  });
  const engine = await testEngine(
    config,
    { role: 'api', ...(options.portalAssetsDir === undefined ? {} : { portalAssetsDir: options.portalAssetsDir }) },
    options.logger,
  );
  // The read models' projector, as a started API process runs it: lookups see what ingest accepted.
  await engine.readModels!.start();
  const { stores } = engine;
  return Object.assign(stores, {
    app: engine.api!,
    redis: stores.redis,
    url: t.url,
    prefix: t.prefix,
    secretKey: config.secretKey,
    config,
    readModels: engine.readModels!,
    async keyFor(roles: Role[], vendorId?: string) {
      const { key } = await stores.apiKeys.create({
        name: `test ${roles.join('+')}`,
        roles,
        ...(vendorId === undefined ? {} : { vendorId }),
      });
      return key;
    },
    async register(vendorId: string, callbackUrl: string, extra: object = {}) {
      const key = await this.keyFor(['vendor'], vendorId);
      const res = await engine.api!.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': key },
        payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: callbackUrl, ...extra },
      });
      if (res.statusCode !== 201) throw new Error(`registration answered ${res.statusCode}: ${res.body}`);
      return { id: res.json<{ webhook_id: string }>().webhook_id, key };
    },
    async close(closeOptions: { keepData?: boolean } = {}) {
      await engine.close(0);
      if (closeOptions.keepData) {
        await t.redis.quit();
        return;
      }
      // Deleted over the helper's own connection: the engine's are closed by now.
      await t.cleanup();
    },
  });
}
