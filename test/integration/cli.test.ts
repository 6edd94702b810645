import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { runCli, startCli } from '../helpers/cli.js';
import { deletePrefix, testRedis } from '../helpers/redis.js';

/** A clean environment: none of the developer's HOOKLINE_* or REDIS_URL leaks in. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'));
  return { ...env, HOOKLINE_LOG_FORMAT: 'json', ...extra };
}

describe('hookline keys (against REDIS_URL)', () => {
  const t = testRedis();
  afterEach(async () => deletePrefix(t.redis, t.prefix));

  it('creates a key printing only the key on stdout, lists it without the key, and revokes it', async () => {
    const env = cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix });
    const created = await runCli(['keys', 'create', '--name', 'acme prod', '--vendor', 'acme', '--role', 'vendor', '--role', 'machines:read'], env);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^hk_[A-Za-z0-9_-]{43}\n$/);
    const key = created.stdout.trim();
    expect(created.stderr).toContain('roles vendor, machines:read for vendor acme');

    const listed = await runCli(['keys', 'list', '--json'], env);
    expect(listed.code).toBe(0);
    const records = JSON.parse(listed.stdout) as { id: string; name: string; vendorId: string; roles: string[] }[];
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ name: 'acme prod', vendorId: 'acme', roles: ['vendor', 'machines:read'] });
    expect(listed.stdout).not.toContain(key);

    const revoked = await runCli(['keys', 'revoke', records[0]?.id ?? ''], env);
    expect(revoked.code).toBe(0);
    expect(JSON.parse((await runCli(['keys', 'list', '--json'], env)).stdout)).toEqual([]);
    const again = await runCli(['keys', 'revoke', records[0]?.id ?? ''], env);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('no API key with id');
  });

  it.each([
    [['keys', 'create', '--name', 'x'], 'give at least one --role'],
    [['keys', 'create', '--name', 'x', '--role', 'root'], 'unknown role "root"'],
    [['keys', 'create', '--name', 'x', '--role', 'vendor'], '--role vendor needs --vendor'],
    [['keys', 'create', '--name', 'x', '--role', 'vendor', '--vendor', 'bad vendor'], '--vendor must be'],
  ])('rejects %j with exit code 2 and a reason', async (args, message) => {
    const result = await runCli(args, cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix }));
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(result.stdout).toBe('');
  });

  it.each([
    [['keys', 'create', '--role', 'admin'], "required option '--name <name>' not specified"],
    [['keys', 'list', '--bogus'], "unknown option '--bogus'"],
    [['nope'], "unknown command 'nope'"],
    [['dlq', 'list'], 'give exactly one of --webhook <id>, --vendor <vendorId> or --all'],
    [['dlq', 'list', '--all', '--vendor', 'v'], 'give exactly one of'],
  ])('answers the usage error %j with exit code 2, as the README promises', async (args, message) => {
    const result = await runCli(args, cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix }));
    expect(result.stderr).toContain(message);
    expect(result.code).toBe(2);
  });

  it('answers --help and --version with exit code 0', async () => {
    const help = await runCli(['keys', '--help'], cleanEnv({}));
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Issue, list and revoke API keys');
    const version = await runCli(['--version'], cleanEnv({}));
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('stops on invalid configuration, naming the variable', async () => {
    const result = await runCli(['keys', 'list'], cleanEnv({ REDIS_URL: 'http://nope', HOOKLINE_API_PORT: 'eighty' }));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('REDIS_URL: expected a redis:// or rediss:// URL');
    expect(result.stderr).toContain('HOOKLINE_API_PORT');
  });

  it('requires HOOKLINE_SECRET_KEY to serve with REDIS_URL', async () => {
    const result = await runCli(['api'], cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix }));
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('HOOKLINE_SECRET_KEY: required when REDIS_URL is set');
  });
});

describe('hookline start with the embedded default', () => {
  let dataDir: string | undefined;
  afterEach(() => {
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('starts its own Redis, serves the API, shares Redis with the CLI, and stops it on SIGTERM; data survives', async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hookline-embedded-'));
    const port = await freeLoopbackPort();
    const env = cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(port) });
    const engine = await startCli(['start'], env, /Hookline API listening/);
    const stateFile = path.join(dataDir, 'redis.json');
    expect(existsSync(stateFile)).toBe(true);
    expect(existsSync(path.join(dataDir, 'secret.key'))).toBe(true);

    const created = await runCli(['keys', 'create', '--name', 'demo', '--vendor', 'v1', '--role', 'vendor'], env);
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    const base = `http://127.0.0.1:${port}`;
    const registered = await fetch(`${base}/vendors/v1/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://example.com/h', secret: 'shh' }),
    });
    expect(registered.status).toBe(201);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);

    const redisPort = (JSON.parse((await import('node:fs')).readFileSync(stateFile, 'utf8')) as { port: number }).port;
    engine.child.kill('SIGTERM');
    expect(await engine.exited).toBe(0);
    expect(existsSync(stateFile)).toBe(false);
    const probe = new Redis({ port: redisPort, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    await expect(probe.connect()).rejects.toThrow();
    probe.disconnect();

    // A second start reads the AOF: the key and the webhook (with its secret) are still there.
    const second = await startCli(['start'], env, /Hookline API listening/);
    try {
      const listed = await fetch(`${base}/vendors/v1/webhooks`, { headers: { 'x-api-key': key } });
      expect(listed.status).toBe(200);
      expect(((await listed.json()) as { webhooks: { secret: string }[] }).webhooks[0]?.secret).toBe('shh');
    } finally {
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    }
  }, 120_000);
});

describe('hookline dlq', () => {
  it('lists dead letters and replays one and then all, with progress', async () => {
    const { testApp } = await import('../helpers/app.js');
    const t = await testApp({ queuePartitions: 2 });
    try {
      const created = await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: 'https://example.com/h' });
      if (!created.ok) throw new Error('setup');
      const webhookId = created.webhook.id;
      const ids = ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222', '33333333-3333-4333-8333-333333333333'];
      for (const [i, deliveryId] of ids.entries()) {
        await t.deliveryLog.recordAttempt({
          job: { deliveryId, eventId: `e${i}`, eventType: 'EVENT_TYPE_MACHINE_CREATED', vendorId: 'v', webhookId, body: '{}', acceptedAtMs: 1_000 + i },
          attempt: { attempt: 1, atMs: 2_000 + i, outcome: 'http_5xx', statusCode: 500, durationMs: 3 },
          status: 'dead',
        });
      }
      const env = cleanEnv({
        REDIS_URL: t.url,
        HOOKLINE_REDIS_PREFIX: t.prefix,
        HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
        HOOKLINE_QUEUE_PARTITIONS: '2',
      });
      const listed = await runCli(['dlq', 'list', '--webhook', webhookId, '--json'], env);
      expect(listed.code).toBe(0);
      expect((JSON.parse(listed.stdout) as { delivery_id: string }[]).map((d) => d.delivery_id)).toEqual([...ids].reverse());

      const one = await runCli(['dlq', 'replay', '--webhook', webhookId, '--delivery', ids[0]!], env);
      expect(one.code).toBe(0);
      expect(one.stdout).toMatch(/^[0-9a-f-]{36}\n$/);
      const twice = await runCli(['dlq', 'replay', '--webhook', webhookId, '--delivery', ids[0]!], env);
      expect(twice.code).toBe(2);
      expect(twice.stderr).toContain('is not a dead letter');

      const all = await runCli(['dlq', 'replay', '--webhook', webhookId], env);
      expect(all.code).toBe(0);
      expect(all.stdout).toBe('2\n');
      expect(all.stderr).toContain('replayed 2/2');
      const counts = await t.queues.counts();
      expect((counts.waiting ?? 0) + (counts.delayed ?? 0) + (counts.prioritized ?? 0)).toBe(3);
      expect(await t.deliveryLog.deadLetters(webhookId, 10)).toEqual([]);

      const malformed = await runCli(['dlq', 'list', '--webhook', 'nope'], env);
      expect(malformed.code).toBe(2);
      expect(malformed.stderr).toContain('--webhook must be a webhook id (a UUID), not "nope"');
      const unknown = await runCli(['dlq', 'list', '--webhook', ids[0]!], env);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain(`no webhook with id ${ids[0]}`);
      expect(unknown.stderr).not.toMatch(/EPIPE|\n\s+at /);
    } finally {
      await t.close();
    }
  }, 60_000);
});
