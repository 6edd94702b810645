import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { buildAdminServer, type AdminServer } from '../../src/admin/server.js';
import { composeStores, type Stores } from '../../src/compose.js';
import type { Role } from '../../src/domain/roles.js';
import { connectRedis, pingRedis, type Redis } from '../../src/store/redis.js';
import { testRedis } from './redis.js';

export type TestApp = Stores & {
  app: AdminServer;
  redis: Redis;
  url: string;
  prefix: string;
  secretKey: Buffer;
  /** Issues a real API key with these roles (and vendor) and returns it. */
  keyFor(roles: Role[], vendorId?: string): Promise<string>;
  close(): Promise<void>;
};

export interface TestAppOptions {
  bodyLimitBytes?: number;
  retryScheduleMs?: readonly number[];
  queuePartitions?: number;
  secretRotationOverlapMs?: number;
  rateLimitPerSecond?: number;
  /** Ingested events per second per API key (unset: no limit). */
  ingestRateLimitPerSecond?: number;
  /**
   * Registration accepts callback URLs on loopback and private addresses (default true: the tests'
   * receivers listen on 127.0.0.1); false applies the SSRF guard as production does by default.
   */
  allowPrivateTargets?: boolean;
  /** Another Redis than the suite's, e.g. a `redis+cluster://` URL. */
  redisUrl?: string;
  /** A fixed key prefix instead of a fresh random one. */
  prefix?: string;
}

/** The admin API and every store, built on the suite's real Redis under a fresh key prefix. */
export async function testApp(options: TestAppOptions = {}): Promise<TestApp> {
  const t = testRedis(options.redisUrl, options.prefix);
  const secretKey = randomBytes(32);
  const queueConnection = connectRedis(t.url, { connectionName: `hookline-test-queues-${t.prefix}`, maxRetriesPerRequest: null, autoPipelining: false });
  const stores = composeStores({
    redis: t.redis,
    queueConnection,
    redisPrefix: t.prefix,
    secretKey,
    retryScheduleMs: options.retryScheduleMs ?? [0, 5_000, 300_000],
    queuePartitions: options.queuePartitions ?? 2,
    secretRotationOverlapMs: options.secretRotationOverlapMs ?? 24 * 3_600_000,
  });
  const app = await buildAdminServer(
    stores.adminDeps({
      logger: pino({ level: 'silent' }),
      bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
      isReady: () => pingRedis(t.redis, 1_000),
      allowPrivateTargets: options.allowPrivateTargets ?? true,
      ...(options.rateLimitPerSecond === undefined ? {} : { rateLimitPerSecond: options.rateLimitPerSecond }),
      ...(options.ingestRateLimitPerSecond === undefined ? {} : { ingestRateLimitPerSecond: options.ingestRateLimitPerSecond }),
    }),
  );
  return Object.assign(stores, {
    app,
    redis: t.redis,
    url: t.url,
    prefix: t.prefix,
    secretKey,
    async keyFor(roles: Role[], vendorId?: string) {
      const { key } = await stores.apiKeys.create({ name: `test ${roles.join('+')}`, roles, ...(vendorId === undefined ? {} : { vendorId }) });
      return key;
    },
    async close() {
      await app.close();
      await stores.queues.close();
      // BullMQ may already have closed it while closing the queues.
      await queueConnection.quit().catch(() => undefined);
      await t.cleanup();
    },
  });
}
