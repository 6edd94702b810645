import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config/env.js';
import { parseRedisUrl, redisUrlForLog } from '../../src/config/redis-url.js';
import { keySlot } from '../../src/store/redis.js';

describe('parseRedisUrl', () => {
  it.each(['redis://127.0.0.1:6379', 'rediss://user:pw@redis.example:6380/2', 'redis://localhost'])(
    'passes one server through: %s',
    (url) => {
      expect(parseRedisUrl(url)).toEqual({ ok: true, kind: 'server', url });
    },
  );

  it.each([
    [
      'redis+cluster://127.0.0.1:7000',
      { seeds: [{ host: '127.0.0.1', port: 7000 }], username: undefined, password: undefined, tls: false },
    ],
    [
      'redis+cluster://10.0.0.1:7000,10.0.0.2:7001, redis-2.internal',
      {
        seeds: [
          { host: '10.0.0.1', port: 7000 },
          { host: '10.0.0.2', port: 7001 },
          { host: 'redis-2.internal', port: 6379 },
        ],
        username: undefined,
        password: undefined,
        tls: false,
      },
    ],
    [
      'rediss+cluster://:s%40cret@[::1]:7000/',
      { seeds: [{ host: '::1', port: 7000 }], username: undefined, password: 's@cret', tls: true },
    ],
    [
      'redis+cluster://hook:pw@h1:7000,h2:7000',
      {
        seeds: [
          { host: 'h1', port: 7000 },
          { host: 'h2', port: 7000 },
        ],
        username: 'hook',
        password: 'pw',
        tls: false,
      },
    ],
  ])('reads a cluster: %s', (url, expected) => {
    expect(parseRedisUrl(url)).toEqual({ ok: true, kind: 'cluster', ...expected });
  });

  it.each([
    ['http://x', /expected a redis:\/\/ or rediss:\/\/ URL, or redis\+cluster:\/\//],
    ['redis+cluster://', /expected redis\+cluster:\/\//],
    ['redis+cluster://h1:7000/0', /no database number/],
    ['redis+cluster://h1:7000?tls=true', /no database number or query/],
    ['redis+cluster://h1:70000', /"h1:70000" is not a host:port seed node/],
    ['redis+cluster://h1:7000,,h2:7000', /"" is not a host:port seed node/],
    ['redis+cluster://a%zz:pw@h1', /credentials are not valid URL encoding/],
  ])('rejects %s with a reason', (url, reason) => {
    const parsed = parseRedisUrl(url);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toMatch(reason);
  });

  it('is what REDIS_URL is validated with', () => {
    expect(loadConfig({ REDIS_URL: 'redis+cluster://127.0.0.1:7000,127.0.0.1:7001' }).redisUrl).toBe(
      'redis+cluster://127.0.0.1:7000,127.0.0.1:7001',
    );
    expect(() => loadConfig({ REDIS_URL: 'redis+cluster://h1:7000/3' })).toThrow(ConfigError);
    expect(() => loadConfig({ REDIS_URL: 'redis+cluster://h1:7000/3' })).toThrow(
      /REDIS_URL: expected redis\+cluster:\/\//,
    );
  });
});

describe('keySlot', () => {
  // Each expected slot is what Redis 7's CLUSTER KEYSLOT answers.
  it.each([
    ['123456789', 12739],
    ['', 0],
    ['foo', 12182],
    ['{user1000}.following', 3443],
    ['{user1000}.followers', 3443],
    ['user1000', 3443],
    ['foo{}{bar}', 8363],
    ['foo{{bar}}zap', 4015],
    ['{bar', 4015],
    ['foo{bar}{zap}', 5061],
    ['{hl:q0}:deliveries:wait', 590],
    ['ключ', 10303],
  ])('%j is in slot %i', (key, slot) => {
    expect(keySlot(key)).toBe(slot);
  });
});

describe('redisUrlForLog', () => {
  it.each([
    ['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379'],
    ['rediss://user:pw@redis.example:6380/2', 'rediss://redis.example:6380/2'],
    ['redis://:p%40ss@h', 'redis://h'],
    ['redis://u:p@ss@h:1', 'redis://h:1'],
    ['redis://default:secret@h:6379?password=other', 'redis://h:6379'],
    ['redis+cluster://hook:pw@h1:7000,h2:7000', 'redis+cluster://h1:7000,h2:7000'],
    ['rediss+cluster://:s%40cret@[::1]:7000/', 'rediss+cluster://[::1]:7000/'],
  ])('%s → %s', (url, shown) => expect(redisUrlForLog(url)).toBe(shown));
});
