import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { redisKeys } from '../../src/store/keys.js';
import { SecretBox } from '../../src/store/secret-box.js';
import { checkSecretKey } from '../../src/store/secret-probe.js';
import { RedisWebhookStore } from '../../src/store/webhooks.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';

describe('checkSecretKey: the probe that tells whether a secret key is the installation’s', () => {
  let t: TestRedis | undefined;
  afterEach(async () => {
    await t?.cleanup();
    t = undefined;
  });

  const webhook = { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: 'https://example.com/h' } as const;

  it('records a probe under the first key, then answers matches for it and mismatch for any other', async () => {
    t = testRedis();
    const keys = redisKeys(t.prefix);
    const [key, other] = [new SecretBox(randomBytes(32)), new SecretBox(randomBytes(32))];
    expect(await checkSecretKey(t.redis, keys, key)).toBe('recorded');
    expect(await checkSecretKey(t.redis, keys, key)).toBe('matches');
    expect(await checkSecretKey(t.redis, keys, other)).toBe('mismatch');
    // Once recorded, the probe alone decides: the webhooks are not read again.
    await new RedisWebhookStore(t.redis, keys, other).create('v', { ...webhook, secret: 'shh' });
    expect(await checkSecretKey(t.redis, keys, key)).toBe('matches');
  });

  it('an installation from before the probe: the key must open a stored secret (or signing key) before a probe is recorded', async () => {
    t = testRedis();
    const keys = redisKeys(t.prefix);
    const [key, other] = [new SecretBox(randomBytes(32)), new SecretBox(randomBytes(32))];
    const store = new RedisWebhookStore(t.redis, keys, key);
    await store.create('v', { ...webhook, signature: 'ed25519' });
    await store.create('v', { ...webhook, eventType: 'EVENT_TYPE_MACHINE_UPDATED', secret: 'shh' });
    expect(await checkSecretKey(t.redis, keys, other)).toBe('mismatch');
    expect(await t.redis.exists(keys.secretProbe)).toBe(0);
    expect(await checkSecretKey(t.redis, keys, key)).toBe('recorded');
    expect(await checkSecretKey(t.redis, keys, other)).toBe('mismatch');
  });

  it('two processes starting at once with different keys on a new installation: the one recorded first wins', async () => {
    t = testRedis();
    const keys = redisKeys(t.prefix);
    const boxes = Array.from(
      { length: 6 },
      (_, n) => new SecretBox(n % 2 === 0 ? Buffer.alloc(32, 1) : Buffer.alloc(32, 2)),
    );
    const answers = await Promise.all(boxes.map((box) => checkSecretKey(t!.redis, keys, box)));
    expect(answers.filter((a) => a === 'recorded')).toHaveLength(1);
    const winner = answers.indexOf('recorded') % 2;
    expect(answers.every((a, n) => (n % 2 === winner ? a !== 'mismatch' : a === 'mismatch'))).toBe(true);
  });
});
