import { describe, expect, it } from 'vitest';
import { describeDurationMs, formatDurationMs, parseDurationMs } from '../../src/lib/duration.js';
import path from 'node:path';
import { ConfigError, defaultDataDir, loadConfig } from '../../src/config/env.js';

describe('durations', () => {
  it.each([
    ['500ms', 500],
    ['15s', 15_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
    ['0s', 0],
    ['1.5s', 1_500],
    [' 5m ', 300_000],
  ])('parses %s', (text, ms) => expect(parseDurationMs(text)).toBe(ms));

  it.each(['', '5', 'm', '5 m', '-5s', '5min', '1e3s', 'abc'])('rejects %j', (text) =>
    expect(parseDurationMs(text)).toBeUndefined(),
  );

  it.each([
    [0, '0s'],
    [200, '200ms'],
    [1_500, '1500ms'],
    [15_000, '15s'],
    [90_000, '90s'],
    [300_000, '5m'],
    [7_200_000, '2h'],
    [86_400_000, '1d'],
  ])('writes %d ms as %s, which parses back', (ms, text) => {
    expect(formatDurationMs(ms)).toBe(text);
    expect(parseDurationMs(text)).toBe(ms);
  });
});

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      redisUrl: undefined,
      redisPrefix: 'hl',
      apiHost: '127.0.0.1',
      apiPort: 8080,
      metricsPort: 9464,
      secretKey: undefined,
      allowPrivateTargets: false,
      workerConcurrency: 50,
      deliveryTimeoutMs: 15_000,
      logLevel: 'info',
      logFormat: 'auto',
      embeddedRedisPort: 0,
      dedupeWindowMs: 48 * 3_600_000,
      rateLimitPerSecond: 100,
      ingestRateLimitPerSecond: 10_000,
      unauthenticatedRateLimitPerSecond: 10,
      maxEventBytes: 1024 * 1024,
    });
    expect(config.retryScheduleMs).toEqual([
      0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 50_400_000, 72_000_000, 86_400_000,
    ]);
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('parses every variable', () => {
    const key = Buffer.alloc(32, 7).toString('base64');
    const config = loadConfig({
      REDIS_URL: 'redis://localhost:6380/2',
      HOOKLINE_API_PORT: '9000',
      HOOKLINE_SECRET_KEY: key,
      HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
      HOOKLINE_WORKER_CONCURRENCY: '8',
      HOOKLINE_RETRY_SCHEDULE: '0s, 1s,500ms',
      HOOKLINE_DELIVERY_TIMEOUT: '2s',
      HOOKLINE_LOG_LEVEL: 'debug',
      HOOKLINE_DEDUPE_WINDOW: '24h',
      HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: '0',
    });
    expect(config).toMatchObject({
      redisUrl: 'redis://localhost:6380/2',
      apiPort: 9000,
      allowPrivateTargets: true,
      workerConcurrency: 8,
      deliveryTimeoutMs: 2_000,
      logLevel: 'debug',
      dedupeWindowMs: 86_400_000,
      ingestRateLimitPerSecond: 0,
    });
    expect(config.retryScheduleMs).toEqual([0, 1_000, 500]);
    expect(config.secretKey?.equals(Buffer.alloc(32, 7))).toBe(true);
  });

  it('keeps the embedded Redis in the per-user state folder by default, whatever the working folder', () => {
    expect(loadConfig({ HOME: '/home/ops' }).dataDir).toBe('/home/ops/.local/state/hookline');
    expect(loadConfig({ HOME: '/home/ops', XDG_STATE_HOME: '/var/state/ops' }).dataDir).toBe('/var/state/ops/hookline');
    // A relative XDG_STATE_HOME is ignored, as the XDG spec says.
    expect(loadConfig({ HOME: '/home/ops', XDG_STATE_HOME: 'state' }).dataDir).toBe('/home/ops/.local/state/hookline');
    expect(defaultDataDir({ LOCALAPPDATA: 'C:\\Users\\ops\\AppData\\Local' }, 'win32')).toMatch(/hookline$/);
    // HOOKLINE_DATA_DIR wins; a relative one is taken from the working folder once, at start-up.
    expect(loadConfig({ HOME: '/home/ops', HOOKLINE_DATA_DIR: '/srv/hookline' }).dataDir).toBe('/srv/hookline');
    expect(loadConfig({ HOOKLINE_DATA_DIR: 'data' }).dataDir).toBe(path.resolve('data'));
  });

  it('trusts no proxy by default, and the addresses, ranges and range names HOOKLINE_TRUST_PROXY lists', () => {
    expect(loadConfig({}).trustProxy).toEqual([]);
    expect(loadConfig({ HOOKLINE_TRUST_PROXY: ' 10.0.0.0/8, 192.168.1.7 ,fd00::/8,::1,loopback,' }).trustProxy).toEqual(
      ['10.0.0.0/8', '192.168.1.7', 'fd00::/8', '::1', 'loopback'],
    );
  });

  it('takes a retention of whole minutes from 1m', () => {
    expect(loadConfig({ HOOKLINE_RETENTION: '1m' }).retentionMs).toBe(60_000);
    expect(loadConfig({ HOOKLINE_RETENTION: '45m' }).retentionMs).toBe(45 * 60_000);
  });

  it('treats empty strings as unset', () => {
    expect(loadConfig({ REDIS_URL: '', HOOKLINE_API_PORT: '' }).apiPort).toBe(8080);
  });

  it.each([
    [{ HOOKLINE_API_PORT: 'abc' }, 'HOOKLINE_API_PORT'],
    [{ HOOKLINE_API_PORT: '70000' }, 'HOOKLINE_API_PORT: expected a port between 0 and 65535'],
    [{ REDIS_URL: 'http://x' }, 'REDIS_URL: expected a redis:// or rediss:// URL'],
    [{ HOOKLINE_SECRET_KEY: 'short' }, 'HOOKLINE_SECRET_KEY: expected 32 random bytes'],
    [{ HOOKLINE_RETRY_SCHEDULE: '0s,5x' }, 'HOOKLINE_RETRY_SCHEDULE: "5x" is not a duration'],
    [{ HOOKLINE_DELIVERY_TIMEOUT: '15' }, 'HOOKLINE_DELIVERY_TIMEOUT: expected a duration'],
    [{ HOOKLINE_ALLOW_PRIVATE_TARGETS: 'maybe' }, 'HOOKLINE_ALLOW_PRIVATE_TARGETS: expected true or false'],
    [{ HOOKLINE_WORKER_CONCURRENCY: '0' }, 'HOOKLINE_WORKER_CONCURRENCY: expected at least 1'],
    [{ HOOKLINE_LOG_LEVEL: 'loud' }, 'HOOKLINE_LOG_LEVEL'],
    [{ HOOKLINE_REDIS_PREFIX: 'a b' }, 'HOOKLINE_REDIS_PREFIX'],
    [{ HOOKLINE_DEDUPE_WINDOW: '12h' }, 'HOOKLINE_DEDUPE_WINDOW: expected at least 24h'],
    [{ HOOKLINE_RETENTION: '30s' }, 'HOOKLINE_RETENTION: expected whole minutes, at least 1m'],
    [{ HOOKLINE_MAX_EVENT_BYTES: '6000000' }, 'HOOKLINE_MAX_EVENT_BYTES: expected at most 5 MiB'],
    [{ HOOKLINE_RETENTION: '90s' }, 'HOOKLINE_RETENTION: expected whole minutes, at least 1m'],
    [
      { HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: '-1' },
      'HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: expected 0 (off) or more',
    ],
    [
      { HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: '1.5' },
      'HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND: expected a whole number of events',
    ],
    [
      { HOOKLINE_UNAUTHENTICATED_RATE_LIMIT_PER_SECOND: '-1' },
      'HOOKLINE_UNAUTHENTICATED_RATE_LIMIT_PER_SECOND: expected 0 (off) or more',
    ],
    [{ HOOKLINE_TRUST_PROXY: 'true' }, 'HOOKLINE_TRUST_PROXY: "true" is not a proxy address'],
    [{ HOOKLINE_TRUST_PROXY: '10.0.0.0/33' }, 'HOOKLINE_TRUST_PROXY: "10.0.0.0/33" is not a proxy address'],
    [
      { HOOKLINE_TRUST_PROXY: '10.0.0.1,proxy.internal' },
      'HOOKLINE_TRUST_PROXY: "proxy.internal" is not a proxy address',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'ftp://ops.example/hooks' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_URL: expected an http or https URL',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'https://user:pw@ops.example/hooks' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_URL: must not contain credentials',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'ops.example/hooks' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_URL: expected an absolute http(s) URL',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: 'plain-secret' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: expected a Standard Webhooks secret',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: 'whsec_c2hvcnQ=' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: expected a Standard Webhooks secret',
    ],
    [
      { HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'https://ops.example/hooks' },
      'HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: required when HOOKLINE_OPERATIONAL_WEBHOOK_URL is set',
    ],
    [
      { HOOKLINE_REPLAY_RUNNING_MAX: '5', HOOKLINE_REPLAY_QUEUED_MAX: '3' },
      'HOOKLINE_REPLAY_RUNNING_MAX: expected at most HOOKLINE_REPLAY_QUEUED_MAX (3)',
    ],
    [{ HOOKLINE_REPLAY_COUNT_MAX: '10' }, 'HOOKLINE_REPLAY_COUNT_MAX: expected at least 100'],
  ])('rejects %j naming the variable', (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });

  it('takes the operational webhook receiver with its secret, and neither by default', () => {
    const secret = `whsec_${Buffer.alloc(32, 1).toString('base64')}`;
    expect(loadConfig({}).operationalWebhook).toBeUndefined();
    expect(
      loadConfig({
        HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'https://ops.example/hooks?c=1',
        HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: secret,
      }).operationalWebhook,
    ).toEqual({
      url: 'https://ops.example/hooks?c=1',
      secret,
    });
    // A secret alone sends nothing, and is not an error: it may be set before the receiver exists.
    expect(loadConfig({ HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: secret }).operationalWebhook).toBeUndefined();
  });

  it('takes the egress proxy with its credentials, none by default, and never echoes a bad one', () => {
    expect(loadConfig({}).egressProxy).toBeUndefined();
    expect(loadConfig({ HOOKLINE_EGRESS_PROXY: 'http://egress:p%40ss@10.0.0.5:3128' }).egressProxy).toEqual({
      host: '10.0.0.5',
      port: 3128,
      authorization: `Basic ${Buffer.from('egress:p@ss').toString('base64')}`,
    });
    for (const bad of [
      'https://egress:proxy-pass-1@proxy:3128',
      'http://egress:proxy-pass-1@proxy:3128/path',
      'proxy-pass-1',
    ]) {
      let message = '';
      try {
        loadConfig({ HOOKLINE_EGRESS_PROXY: bad });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        message = (error as Error).message;
      }
      expect(message).toContain('HOOKLINE_EGRESS_PROXY');
      expect(message).not.toContain('proxy-pass-1');
    }
  });

  it('never echoes an invalid operational webhook secret', () => {
    expect(() => loadConfig({ HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: 'whsec_not-base64-sekrit' })).toThrow(ConfigError);
    expect(() => loadConfig({ HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: 'whsec_not-base64-sekrit' })).not.toThrow(/sekrit/);
  });

  it('names every bad variable at once and never echoes the secret key', () => {
    try {
      loadConfig({ HOOKLINE_API_PORT: 'x', HOOKLINE_METRICS_PORT: 'y', HOOKLINE_SECRET_KEY: 'sekrit-value' });
      expect.unreachable();
    } catch (error) {
      const message = (error as Error).message;
      expect(message).toContain('HOOKLINE_API_PORT');
      expect(message).toContain('HOOKLINE_METRICS_PORT');
      expect(message).toContain('HOOKLINE_SECRET_KEY');
      expect(message).not.toContain('sekrit-value');
    }
  });
});

describe('describeDurationMs', () => {
  it.each([
    [272_105_000, '3d 3h 35m 5s'],
    [305_000, '5m 5s'],
    [3_600_000, '1h'],
    [1_500, '1s 500ms'],
    [0, '0ms'],
  ])('%d → %s', (ms, text) => expect(describeDurationMs(ms)).toBe(text));
});
