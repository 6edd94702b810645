import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { buildAdminServer, type AdminServer } from '../../src/admin/server.js';
import type { Role } from '../../src/domain/roles.js';
import { RedisApiKeyStore } from '../../src/store/api-keys.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { RedisMachineStore } from '../../src/store/machines.js';
import { createAgentStatusStore, createTaskStore } from '../../src/store/read-models.js';
import { pingRedis, type Redis } from '../../src/store/redis.js';
import { SecretBox } from '../../src/store/secret-box.js';
import { RedisWebhookStore } from '../../src/store/webhooks.js';
import { testRedis } from './redis.js';

export interface TestApp {
  app: AdminServer;
  redis: Redis;
  keys: RedisKeys;
  apiKeys: RedisApiKeyStore;
  webhooks: RedisWebhookStore;
  tasks: ReturnType<typeof createTaskStore>;
  agents: ReturnType<typeof createAgentStatusStore>;
  machines: RedisMachineStore;
  secretKey: Buffer;
  /** Issues a real API key with these roles (and vendor) and returns it. */
  keyFor(roles: Role[], vendorId?: string): Promise<string>;
  close(): Promise<void>;
}

/** The admin API built on the suite's real Redis under a fresh key prefix. */
export async function testApp(options: { bodyLimitBytes?: number } = {}): Promise<TestApp> {
  const t = testRedis();
  const keys = redisKeys(t.prefix);
  const secretKey = randomBytes(32);
  const apiKeys = new RedisApiKeyStore(t.redis, keys);
  const webhooks = new RedisWebhookStore(t.redis, keys, new SecretBox(secretKey));
  const tasks = createTaskStore(t.redis, keys);
  const agents = createAgentStatusStore(t.redis, keys);
  const machines = new RedisMachineStore(t.redis, keys);
  const app = await buildAdminServer({
    logger: pino({ level: 'silent' }),
    bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
    apiKeys,
    webhooks,
    tasks,
    agents,
    machines,
    isReady: () => pingRedis(t.redis, 1_000),
  });
  return {
    app,
    redis: t.redis,
    keys,
    apiKeys,
    webhooks,
    tasks,
    agents,
    machines,
    secretKey,
    async keyFor(roles, vendorId) {
      const { key } = await apiKeys.create({ name: `test ${roles.join('+')}`, roles, ...(vendorId === undefined ? {} : { vendorId }) });
      return key;
    },
    async close() {
      await app.close();
      await t.cleanup();
    },
  };
}
