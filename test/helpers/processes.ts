import { RedisApiKeyStore } from '../../src/store/api-keys.js';
import { redisKeys } from '../../src/store/keys.js';
import { connectRedis } from '../../src/store/redis.js';

/** The caller's environment without REDIS_URL or any HOOKLINE_* variable: a process started with it sees only what a test sets. */
export function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'),
  );
}

/** Issues a producer key (events:write) and a vendor key straight into Redis, as the operator's CLI does. */
export async function issueKeys(
  redisUrl: string,
  prefix: string,
  vendorId = 'v',
): Promise<{ eventsKey: string; vendorKey: string }> {
  const admin = connectRedis(redisUrl, { connectionName: 'test-setup', maxRetriesPerRequest: 3 });
  try {
    const apiKeys = new RedisApiKeyStore(admin, redisKeys(prefix));
    const eventsKey = (await apiKeys.create({ name: 'producer', roles: ['events:write'] })).key;
    const vendorKey = (await apiKeys.create({ name: 'vendor', roles: ['vendor'], vendorId })).key;
    return { eventsKey, vendorKey };
  } finally {
    await admin.quit();
  }
}
