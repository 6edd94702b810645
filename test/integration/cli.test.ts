import { execFile, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import type { EmbeddedState } from '../../src/embedded/defaults.js';
import { deliveryIdFor } from '../../src/domain/ids.js';
import { ensureRedisServerBinary, freeLoopbackPort, startRedisServer } from '../../src/embedded/redis-server.js';
import { RedisApiKeyStore } from '../../src/store/api-keys.js';
import { redisKeys } from '../../src/store/keys.js';
import { SecretBox } from '../../src/store/secret-box.js';
import { RedisWebhookStore } from '../../src/store/webhooks.js';
import { connectRedis } from '../../src/store/redis.js';
import { withBuildLock } from '../helpers/build-lock.js';
import { runCli, spawnCli, startCli } from '../helpers/cli.js';
import { deletePrefix, testRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const readState = (dataDir: string) =>
  JSON.parse(readFileSync(path.join(dataDir, 'redis.json'), 'utf8')) as EmbeddedState;

/** Whether process `pid` runs. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The redis-server processes working in `dataDir`'s Redis folder (Linux: their working folder). */
function redisServersOf(dataDir: string): number[] {
  const folder = realpathSync(path.join(dataDir, 'redis'));
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return (
          readlinkSync(`/proc/${pid}/cwd`) === folder &&
          readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('redis-server')
        );
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Every file and folder under `dir` (itself included) whose mode lets another user read, write or enter it. */
function openToOthers(dir: string): string[] {
  return [dir, ...readdirSync(dir, { recursive: true }).map((name) => path.join(dir, String(name)))]
    .filter((file) => (statSync(file).mode & 0o077) !== 0)
    .map((file) => `${path.relative(dir, file) || '.'} ${(statSync(file).mode & 0o777).toString(8)}`);
}

/**
 * Ends an engine a failed test left running: SIGTERM first, so that it stops its embedded Redis
 * (which SIGKILL would leave running); SIGKILL when it does not end within 20 s.
 */
async function stopEngine(engine: { child: ChildProcess; exited: Promise<number | null> }): Promise<void> {
  if (engine.child.exitCode === null && engine.child.signalCode === null) engine.child.kill('SIGTERM');
  const timer = setTimeout(() => engine.child.kill('SIGKILL'), 20_000);
  await engine.exited;
  clearTimeout(timer);
}

/** A clean environment: none of the developer's HOOKLINE_* or REDIS_URL leaks in. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'),
  );
  return { ...env, HOOKLINE_LOG_FORMAT: 'json', ...extra };
}

describe('hookline keys (against REDIS_URL)', () => {
  const t = testRedis();
  afterEach(async () => deletePrefix(t.redis, t.prefix));

  it('creates a key printing only the key on stdout, lists it without the key, and revokes it', async () => {
    const env = cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix });
    const created = await runCli(
      ['keys', 'create', '--name', 'acme prod', '--vendor', 'acme', '--role', 'vendor', '--role', 'machines:read'],
      env,
    );
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^hk_[A-Za-z0-9_-]{43}\n$/);
    const key = created.stdout.trim();
    expect(created.stderr).toContain('roles vendor, machines:read for vendor acme');
    // The change is logged (a JSON line: stderr is no terminal here), with who made it and never the key.
    const createdLine = JSON.parse(created.stderr) as Record<string, unknown>;
    expect(createdLine).toMatchObject({
      level: 30,
      event: 'api_key.created',
      keyName: 'acme prod',
      vendorId: 'acme',
      by: expect.any(String) as unknown,
    });
    expect(created.stderr).not.toContain(key);

    // The API's names and ISO-8601 times, in the API's envelope.
    const listed = await runCli(['keys', 'list', '--json'], env);
    expect(listed.code).toBe(0);
    const records = (JSON.parse(listed.stdout) as { api_keys: Record<string, unknown>[] }).api_keys;
    expect(records).toEqual([
      {
        key_id: createdLine.keyId,
        name: 'acme prod',
        vendor_id: 'acme',
        roles: ['vendor', 'machines:read'],
        created_at: expect.any(String) as unknown,
      },
    ]);
    expect(new Date(String(records[0]?.created_at)).toISOString()).toBe(records[0]?.created_at);
    expect(listed.stdout).not.toContain(key);
    // Without --json: a header, then a row per key, as the other lists print them.
    const table = (await runCli(['keys', 'list'], env)).stdout.trimEnd().split('\n');
    expect(table).toHaveLength(2);
    expect(table[0]).toMatch(/^KEY\s+NAME\s+VENDOR\s+ROLES\s+CREATED$/);
    expect(table[1]).toMatch(
      new RegExp(
        `^${String(createdLine.keyId)}\\s+acme prod\\s+acme\\s+vendor,machines:read\\s+${String(records[0]?.created_at)}$`,
      ),
    );
    expect(table[1]!.indexOf('acme prod')).toBe(table[0]!.indexOf('NAME'));

    const revoked = await runCli(['keys', 'revoke', String(createdLine.keyId)], env);
    expect(revoked.code).toBe(0);
    expect(JSON.parse(revoked.stderr)).toMatchObject({
      event: 'api_key.revoked',
      keyId: createdLine.keyId,
      keyName: 'acme prod',
    });
    expect(JSON.parse((await runCli(['keys', 'list', '--json'], env)).stdout)).toEqual({ api_keys: [] });
    const again = await runCli(['keys', 'revoke', String(createdLine.keyId)], env);
    expect(again.code).toBe(2);
    expect(again.stderr).toBe(`hookline: no API key with id ${String(createdLine.keyId)}\n`);
  }, 120_000);

  it.each([[['keys', 'list']], [['dlq', 'list', '--webhook', '11111111-1111-4111-8111-111111111111']]])(
    'says in one sentence, within seconds, that %j cannot reach Redis (without its credentials)',
    async (args) => {
      const port = await freeLoopbackPort();
      const startedMs = Date.now();
      const result = await runCli(
        args,
        cleanEnv({
          REDIS_URL: `redis://hook:pa55word@127.0.0.1:${port}`,
          HOOKLINE_SECRET_KEY: Buffer.alloc(32, 1).toString('base64'),
        }),
      );
      const elapsedMs = Date.now() - startedMs;
      console.log(`hookline ${args.join(' ')} against a closed port: exit ${result.code} after ${elapsedMs} ms`);
      expect(result.stderr).toBe(`hookline: cannot reach Redis at redis://127.0.0.1:${port} (connection refused)\n`);
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      // Starting the CLI from source takes a few seconds on a busy machine; minutes would be a hang.
      expect(elapsedMs).toBeLessThan(20_000);
    },
    60_000,
  );

  it('ends quietly when its reader closes stdout (`hookline keys list | head -0`), with no EPIPE trace', async () => {
    const env = cleanEnv({ REDIS_URL: t.url, HOOKLINE_REDIS_PREFIX: t.prefix });
    expect((await runCli(['keys', 'create', '--name', 'pipe', '--role', 'admin'], env)).code).toBe(0);
    const child = spawnCli(['keys', 'list'], env);
    // Closed before the command writes its first line.
    child.stdout?.destroy();
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(stderr).toBe('');
    expect(code).toBe(0);
  }, 60_000);

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

  it('refuses in one sentence to serve with a secret key that does not open the stored secrets, before it listens', async () => {
    const [sealedWith, other] = [randomBytes(32), randomBytes(32)];
    // An installation from before the probe: a secret sealed under one key, and nothing else.
    const created = await new RedisWebhookStore(t.redis, redisKeys(t.prefix), new SecretBox(sealedWith)).create('v', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
      secret: 'shh',
    });
    expect(created.ok).toBe(true);
    const port = await freeLoopbackPort();
    const env = (key: Buffer) =>
      cleanEnv({
        REDIS_URL: t.url,
        HOOKLINE_REDIS_PREFIX: t.prefix,
        HOOKLINE_SECRET_KEY: key.toString('base64'),
        HOOKLINE_API_PORT: String(port),
      });
    const refusal = `hookline: HOOKLINE_SECRET_KEY does not open the webhook secrets stored in ${t.url} (prefix ${t.prefix}): they were sealed with another key; start with that one as HOOKLINE_SECRET_KEY\n`;

    const wrong = await runCli(['api'], env(other), 60_000);
    expect(wrong.stderr).toBe(refusal);
    expect(wrong.code).toBe(1);
    // The key they were sealed with serves, and leaves the probe every later start opens.
    const right = await startCli(['api'], env(sealedWith), /Hookline API listening/);
    right.child.kill('SIGTERM');
    expect(await right.exited).toBe(0);
    expect(await t.redis.exists(redisKeys(t.prefix).secretProbe)).toBe(1);
    await t.redis.del(redisKeys(t.prefix).webhooks.byId);
    const probed = await runCli(
      ['worker'],
      { ...env(other), HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()) },
      60_000,
    );
    expect(probed.stderr).toBe(refusal);
    expect(probed.code).toBe(1);
  }, 120_000);

  it('stops in one sentence when Redis refuses the start-up check (it wants a password REDIS_URL lacks)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-auth-'));
    const server = await startRedisServer({
      binary: await ensureRedisServerBinary(() => undefined),
      port: 0,
      dir,
      appendOnly: false,
      private: { password: 'sekrit-password-0123' },
    });
    try {
      const result = await runCli(
        ['api'],
        cleanEnv({
          REDIS_URL: server.url,
          HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64'),
          HOOKLINE_API_PORT: String(await freeLoopbackPort()),
        }),
        60_000,
      );
      expect(result.stderr).toBe(
        `hookline: cannot check the secret key against Redis at ${server.url} (authentication failed)\n`,
      );
      expect(result.code).toBe(1);
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

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

  it('starts its own Redis, serves the API, shares Redis with the CLI, and stops it on SIGTERM; data and port survive', async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hookline-embedded-'));
    const port = await freeLoopbackPort();
    const env = cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(port) });
    const engine = await startCli(['start'], env, /Hookline API listening/);
    const stateFile = path.join(dataDir, 'redis.json');
    const state = () => JSON.parse(readFileSync(stateFile, 'utf8')) as EmbeddedState;
    expect(state()).toEqual({
      port: expect.any(Number) as unknown,
      id: expect.stringMatching(/^[0-9a-f]{32}$/) as unknown,
      url: `redis://127.0.0.1:${state().port}`,
      pid: engine.child.pid,
      redisPid: expect.any(Number) as unknown,
    });
    const { id, redisPid } = state();
    expect(existsSync(path.join(dataDir, 'secret.key'))).toBe(true);

    const created = await runCli(['keys', 'create', '--name', 'demo', '--vendor', 'v1', '--role', 'vendor'], env);
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    const base = `http://127.0.0.1:${port}`;
    const registered = await fetch(`${base}/vendors/v1/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: 'https://example.com/h',
        secret: 'shh',
      }),
    });
    expect(registered.status).toBe(201);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);

    const redisPort = state().port;
    engine.child.kill('SIGTERM');
    expect(await engine.exited).toBe(0);
    // Stopped: only the id and the port are remembered, so that the next start uses the port again (README: "0 reuses the last one").
    expect(state()).toEqual({ port: redisPort, id });
    expect(alive(redisPid!)).toBe(false);
    const probe = new Redis({ port: redisPort, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    await expect(probe.connect()).rejects.toThrow();
    probe.disconnect();

    // A second start reads the AOF: the key and the webhook (with its secret) are still there.
    const second = await startCli(['start'], env, /Hookline API listening/);
    try {
      expect(state()).toMatchObject({ port: redisPort, id, pid: second.child.pid });
      const listed = await fetch(`${base}/vendors/v1/webhooks`, { headers: { 'x-api-key': key } });
      expect(listed.status).toBe(200);
      expect(((await listed.json()) as { webhooks: { secret: string }[] }).webhooks[0]?.secret).toBe('shh');
    } finally {
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    }
  }, 120_000);

  it('finds the running engine’s data from any working folder (the per-user state folder), and says so when there is none', async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'hookline-state-'));
    const [engineCwd, otherCwd, stateHome] = ['engine-cwd', 'elsewhere', 'state'].map((name) =>
      path.join(dataDir ?? '', name),
    );
    for (const dir of [engineCwd, otherCwd]) mkdirSync(dir ?? '');
    const port = await freeLoopbackPort();
    // No HOOKLINE_DATA_DIR: where the data goes is the state folder under XDG_STATE_HOME, whatever the folder.
    const env = cleanEnv({ XDG_STATE_HOME: stateHome ?? '', HOOKLINE_API_PORT: String(port) });

    const none = await runCli(['keys', 'list'], env, 30_000, { cwd: otherCwd });
    expect(none.stderr).toContain(
      `hookline: no Hookline engine data found in ${path.join(stateHome ?? '', 'hookline')}`,
    );
    expect(none.stderr).toMatch(/REDIS_URL=.*HOOKLINE_DATA_DIR=/);
    expect(none.code).toBe(1);
    expect(existsSync(path.join(stateHome ?? '', 'hookline'))).toBe(false);

    const engine = await startCli(['start'], env, /Hookline API listening/, 60_000, { cwd: engineCwd });
    try {
      const created = await runCli(
        ['keys', 'create', '--name', 'from elsewhere', '--vendor', 'v1', '--role', 'vendor'],
        env,
        30_000,
        { cwd: otherCwd },
      );
      expect(created.code).toBe(0);
      // The engine knows the key made from another folder, and the listing from there shows it.
      const answered = await fetch(`http://127.0.0.1:${port}/vendors/v1/webhooks`, {
        headers: { 'x-api-key': created.stdout.trim() },
      });
      expect(answered.status).toBe(200);
      const listed = await runCli(['keys', 'list'], env, 30_000, { cwd: otherCwd });
      expect(listed.stdout).toContain('from elsewhere');
      expect(existsSync(path.join(otherCwd ?? '', '.hookline'))).toBe(false);
    } finally {
      engine.child.kill('SIGTERM');
      expect(await engine.exited).toBe(0);
    }
  }, 420_000);
});

describe('the embedded Redis is the data folder’s own', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  function newDataDir(): string {
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-own-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  }

  /** A plain redis-server (no password) in `dir`, as another installation (or an earlier Hookline) runs one. */
  async function plainRedis(dir: string, port = 0) {
    const server = await startRedisServer({
      binary: await ensureRedisServerBinary(() => undefined),
      port,
      dir,
      appendOnly: true,
    });
    cleanups.push(() => server.stop());
    return server;
  }

  /** Issues an API key named `name` under the default prefix `hl` of the Redis at `url`. */
  async function issueKey(url: string, name: string): Promise<void> {
    const redis = connectRedis(url, { connectionName: 'test-setup', maxRetriesPerRequest: 1 });
    try {
      await new RedisApiKeyStore(redis, redisKeys('hl')).create({ name, roles: ['admin'] });
    } finally {
      await redis.quit();
    }
  }

  it('requires a password from a 0600 file, never on its command line, keeps every file this user’s alone, and gives one to a data folder from before', async () => {
    const dataDir = newDataDir();
    // A data folder as an earlier version left it: Redis without a password, files anyone may read.
    const legacy = await plainRedis(path.join(dataDir, 'redis'));
    await issueKey(legacy.url, 'from before');
    await legacy.stop();
    writeFileSync(path.join(dataDir, 'redis.json'), `${JSON.stringify({ port: legacy.port })}\n`);
    for (const file of [dataDir, path.join(dataDir, 'redis'), path.join(dataDir, 'redis.json')])
      chmodSync(file, file.endsWith('.json') ? 0o644 : 0o755);

    const env = cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(await freeLoopbackPort()) });
    const engine = await startCli(['start'], env, /Hookline API listening/);
    cleanups.push(() => stopEngine(engine));
    const password = readFileSync(path.join(dataDir, 'redis.password'), 'utf8').trim();
    expect(password).toMatch(/^[0-9a-f]{64}$/);
    const { port, redisPid } = readState(dataDir);
    expect(openToOthers(dataDir)).toEqual([]);
    // `ps` shows every user a process's command line.
    expect(readFileSync(`/proc/${redisPid}/cmdline`, 'utf8')).not.toContain(password);
    const stranger = new Redis({
      port,
      lazyConnect: true,
      enableReadyCheck: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    stranger.on('error', () => undefined);
    await stranger.connect();
    await expect(stranger.get('{hl:keys}:by-hash')).rejects.toThrow(/NOAUTH/);
    stranger.disconnect();

    // The commands read the password too: the key issued before the upgrade is still there.
    const listed = await runCli(['keys', 'list'], env);
    expect(listed.stdout).toContain('from before');
    engine.child.kill('SIGTERM');
    expect(await engine.exited).toBe(0);
    expect(engine.output()).not.toContain(password);
  }, 120_000);

  it('never uses another installation’s Redis, whether on HOOKLINE_EMBEDDED_REDIS_PORT or on the port it had last time', async () => {
    const foreign = await plainRedis(path.join(newDataDir(), 'redis'));
    await issueKey(foreign.url, 'foreign key');
    const foreignKeys = async () => {
      const redis = connectRedis(foreign.url, { connectionName: 'test-check', maxRetriesPerRequest: 1 });
      try {
        return (await new RedisApiKeyStore(redis, redisKeys('hl')).list()).map((k) => k.name);
      } finally {
        await redis.quit();
      }
    };

    const dataDir = newDataDir();
    const env = cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_EMBEDDED_REDIS_PORT: String(foreign.port) });
    const created = await runCli(['keys', 'create', '--name', 'mine', '--role', 'admin'], env);
    expect(created.stderr).toBe(
      `hookline: the embedded Redis of ${dataDir} cannot start on port ${foreign.port} (HOOKLINE_EMBEDDED_REDIS_PORT): another process holds it; choose another port, or 0 for a free one\n`,
    );
    expect(created.code).toBe(1);
    expect(created.stdout).toBe('');
    const listed = await runCli(['keys', 'list'], env);
    expect(listed.code).toBe(1);
    expect(listed.stdout).toBe('');

    // A port remembered from the last run, since taken by the other Redis: a Redis of its own, on another port.
    const remembered = newDataDir();
    const rememberedEnv = cleanEnv({ HOOKLINE_DATA_DIR: remembered });
    expect((await runCli(['keys', 'create', '--name', 'mine', '--role', 'admin'], rememberedEnv)).code).toBe(0);
    writeFileSync(
      path.join(remembered, 'redis.json'),
      `${JSON.stringify({ ...readState(remembered), port: foreign.port, pid: process.pid })}\n`,
    );
    const own = await runCli(['keys', 'list'], rememberedEnv);
    expect(own.code, own.stderr).toBe(0);
    expect(own.stdout).toContain('mine');
    expect(own.stdout).not.toContain('foreign key');
    expect(await foreignKeys()).toEqual(['foreign key']);
  }, 120_000);

  it('hookline start on an API port another process holds exits 1 with one line, and leaves no redis-server behind', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => holder.close(() => resolve())));
    const port = (holder.address() as { port: number }).port;
    const dataDir = newDataDir();
    const result = await runCli(
      ['start'],
      cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(port) }),
      60_000,
    );
    expect(result.stderr).toBe(
      `hookline: cannot listen on 127.0.0.1:${port}: another process holds the port; stop it, or set HOOKLINE_API_PORT to a free port\n`,
    );
    expect(result.code).toBe(1);
    // Its worker never started: no shutdown line may speak of deliveries it never had.
    expect(result.stdout).not.toMatch(/grace period|in-flight deliveries|unfinished deliveries/);
    expect(redisServersOf(dataDir)).toEqual([]);
    expect(readState(dataDir).pid).toBeUndefined();
  }, 90_000);

  it('a redis-server an engine left behind (killed with SIGKILL) is taken over by the next start, and stopped with it', async () => {
    const dataDir = newDataDir();
    const env = cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(await freeLoopbackPort()) });
    const killed = await startCli(['start'], env, /Hookline API listening/);
    const { redisPid } = readState(dataDir);
    // Should the test fail before the next start takes it over.
    cleanups.push(() => void (alive(redisPid!) && process.kill(redisPid!, 'SIGTERM')));
    killed.child.kill('SIGKILL');
    await killed.exited;
    expect(alive(redisPid!)).toBe(true);

    const next = await startCli(['start'], env, /Hookline API listening/);
    cleanups.push(() => stopEngine(next));
    expect(readState(dataDir)).toMatchObject({ pid: next.child.pid, redisPid });
    next.child.kill('SIGTERM');
    expect(await next.exited).toBe(0);
    expect(redisServersOf(dataDir)).toEqual([]);
  }, 120_000);

  it.each(['SIGINT', 'SIGTERM', 'SIGHUP'] as const)(
    'hookline start stops its embedded Redis on %s',
    async (signal) => {
      const dataDir = newDataDir();
      const engine = await startCli(
        ['start'],
        cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(await freeLoopbackPort()) }),
        /Hookline API listening/,
      );
      cleanups.push(() => stopEngine(engine));
      const { redisPid } = readState(dataDir);
      expect(redisServersOf(dataDir)).toEqual([redisPid]);
      engine.child.kill(signal);
      expect(await engine.exited).toBe(0);
      expect(alive(redisPid!)).toBe(false);
      expect(redisServersOf(dataDir)).toEqual([]);
    },
    90_000,
  );
});

describe('engines sharing one Redis', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  const started = async (args: string[], env: NodeJS.ProcessEnv, ready: RegExp) => {
    const engine = await startCli(args, env, ready);
    cleanups.push(() => stopEngine(engine));
    return engine;
  };

  it('a second hookline start on a data folder in use is refused in one sentence naming the running engine; a worker joins it, warned of the settings that differ', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'hookline-second-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const apiPort = await freeLoopbackPort();
    const first = await started(
      ['start'],
      cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(apiPort) }),
      /Hookline API listening/,
    );
    // It records itself among the running engines just after its start-up line.
    const embedded = new Redis({
      port: readState(dataDir).port,
      password: readFileSync(path.join(dataDir, 'redis.password'), 'utf8').trim(),
    });
    cleanups.push(() => void embedded.disconnect());
    await waitFor(
      async () => (await embedded.hlen(redisKeys('hl').engines)) === 1,
      10_000,
      'the engine recorded as running',
    );

    const second = await runCli(
      ['start'],
      cleanEnv({ HOOKLINE_DATA_DIR: dataDir, HOOKLINE_API_PORT: String(await freeLoopbackPort()) }),
      60_000,
    );
    expect(second.stderr).toBe(
      `hookline: another Hookline process runs on ${dataDir}: pid ${first.child.pid} (hookline start, API http://127.0.0.1:${apiPort}); ` +
        'stop it before starting another engine there, or add a delivery worker to it with `hookline worker`\n',
    );
    expect(second.code).toBe(1);
    expect((await fetch(`http://127.0.0.1:${apiPort}/readyz`)).status).toBe(200);

    const worker = await started(
      ['worker'],
      cleanEnv({
        HOOKLINE_DATA_DIR: dataDir,
        HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
        HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
      }),
      /engine\.settings_differ/,
    );
    const warning = worker
      .output()
      .split('\n')
      .find((line) => line.includes('engine.settings_differ'))!;
    expect(JSON.parse(warning)).toMatchObject({
      level: 40,
      differences: [
        {
          variable: 'HOOKLINE_ALLOW_PRIVATE_TARGETS',
          here: 'true',
          running: [
            { value: 'false', engines: [`pid ${first.child.pid} (hookline start, API http://127.0.0.1:${apiPort})`] },
          ],
        },
      ],
    });
  }, 180_000);

  it('engines on one REDIS_URL: one with other settings is warned which differ and where; one with the same settings is not', async () => {
    const t = testRedis();
    cleanups.push(() => t.cleanup());
    const env = async (extra: Record<string, string>) =>
      cleanEnv({
        REDIS_URL: t.url,
        HOOKLINE_REDIS_PREFIX: t.prefix,
        HOOKLINE_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
        HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
        ...extra,
      });
    const registered = (n: number) => async () => (await t.redis.hlen(redisKeys(t.prefix).engines)) === n;
    const a = await started(['worker'], await env({ HOOKLINE_RETRY_SCHEDULE: '0s,1m' }), /delivery worker running/);
    await waitFor(registered(1), 10_000, 'the first worker registered');
    const same = await started(['worker'], await env({ HOOKLINE_RETRY_SCHEDULE: '0s,1m' }), /delivery worker running/);
    await waitFor(registered(2), 10_000, 'the second worker registered');
    expect(same.output()).not.toContain('settings_differ');

    const other = await started(
      ['worker'],
      await env({ HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true' }),
      /engine\.settings_differ/,
    );
    await waitFor(registered(3), 10_000, 'the third worker registered');
    const line = JSON.parse(
      other
        .output()
        .split('\n')
        .find((l) => l.includes('engine.settings_differ'))!,
    ) as { differences: unknown; msg: string };
    const both = [`pid ${a.child.pid} (hookline worker)`, `pid ${same.child.pid} (hookline worker)`];
    expect(line.differences).toEqual([
      { variable: 'HOOKLINE_ALLOW_PRIVATE_TARGETS', here: 'true', running: [{ value: 'false', engines: both }] },
      {
        variable: 'HOOKLINE_RETRY_SCHEDULE',
        here: '0s,5s,5m,30m,2h,5h,10h,14h,20h,1d',
        running: [{ value: '0s,1m', engines: both }],
      },
    ]);
    expect(line.msg).toContain('HOOKLINE_ALLOW_PRIVATE_TARGETS is true here, false in');
    // A stopped engine takes its record with it.
    same.child.kill('SIGTERM');
    expect(await same.exited).toBe(0);
    await waitFor(registered(2), 10_000, 'the stopped worker gone from the running engines');
  }, 180_000);
});

describe('hookline dlq', () => {
  it('lists dead letters and replays one and then all, with progress', async () => {
    const { testApp } = await import('../helpers/app.js');
    const t = await testApp({ queuePartitions: 2 });
    try {
      const created = await t.webhooks.create('v', {
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        callbackUrl: 'https://example.com/h',
      });
      if (!created.ok) throw new Error('setup');
      const webhookId = created.webhook.id;
      const ids = [
        '11111111-1111-4111-8111-111111111111',
        '22222222-2222-4222-8222-222222222222',
        '33333333-3333-4333-8333-333333333333',
      ];
      for (const [i, deliveryId] of ids.entries()) {
        await t.deliveryLog.recordAttempt({
          job: {
            deliveryId,
            eventId: `e${i}`,
            eventType: 'EVENT_TYPE_MACHINE_CREATED',
            vendorId: 'v',
            webhookId,
            body: '{}',
            acceptedAtMs: 1_000 + i,
          },
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
      expect(
        (JSON.parse(listed.stdout) as { dead_letters: { delivery_id: string }[] }).dead_letters.map(
          (d) => d.delivery_id,
        ),
      ).toEqual([...ids].reverse());
      // --json: what the API's cross-webhook dead-letter route (GET /admin/v1/dead-letters) answers for the same records.
      const json = await runCli(['dlq', 'list', '--webhook', webhookId, '--limit', '1', '--json'], env);
      expect(JSON.parse(json.stdout)).toEqual({
        dead_letters: [
          {
            delivery_id: ids[2],
            event_id: 'e2',
            event_type: 'EVENT_TYPE_MACHINE_CREATED',
            status: 'dead',
            attempts: 1,
            last_outcome: 'http_5xx',
            last_status_code: 500,
            created_at: new Date(1_002).toISOString(),
            updated_at: expect.any(String) as unknown,
            next_attempt_at: null,
            replay_of: null,
            machine_id: null,
            deployment_id: null,
            webhook_id: webhookId,
            vendor_id: 'v',
          },
        ],
      });

      const one = await runCli(['dlq', 'replay', '--webhook', webhookId, '--delivery', ids[0]!], env);
      expect(one.code).toBe(0);
      expect(one.stdout).toMatch(/^[0-9a-f-]{36}\n$/);
      const twice = await runCli(['dlq', 'replay', '--webhook', webhookId, '--delivery', ids[0]!], env);
      expect(twice.code).toBe(2);
      expect(twice.stderr).toContain('is not a dead letter');

      const all = await runCli(['dlq', 'replay', '--webhook', webhookId], env);
      expect(all.code).toBe(0);
      expect(all.stdout).toBe('2\n');
      // Queued, not yet delivered; and stderr is no terminal here (a log, say): no progress line rewritten with \r.
      expect(all.stderr).toMatch(/^task [0-9a-f-]{36}\n/);
      expect(all.stderr).toContain(
        `queued 2 replays for a running worker to deliver; follow them with: hookline deliveries tail --webhook ${webhookId}\n`,
      );
      expect(all.stderr).not.toMatch(/\r|replayed/);
      const counts = await t.queues.counts();
      expect((counts.waiting ?? 0) + (counts.delayed ?? 0) + (counts.prioritized ?? 0)).toBe(3);
      expect(await t.deliveryLog.deadLetters(webhookId, 10)).toEqual([]);
      await t.deliveryLog.recordAttempt({
        job: {
          deliveryId: randomUUID(),
          eventId: 'e3',
          eventType: 'EVENT_TYPE_MACHINE_CREATED',
          vendorId: 'v',
          webhookId,
          body: '{}',
          acceptedAtMs: 1_003,
        },
        attempt: { attempt: 1, atMs: 2_003, outcome: 'http_5xx', statusCode: 500, durationMs: 3 },
        status: 'dead',
      });
      expect((await runCli(['dlq', 'replay', '--webhook', webhookId], env)).stderr).toContain(
        'queued 1 replay for a running worker',
      );

      // A range of the event feed: a dry run counts, the replay queues each event again.
      await t.eventLog.append(
        ['f0', 'f1', 'f2', 'f3'].map((eventId) => ({
          webhookId,
          deliveryId: deliveryIdFor(eventId, webhookId),
          eventId,
          eventType: 'EVENT_TYPE_MACHINE_CREATED',
          body: `{"event_id":"${eventId}"}`,
        })),
      );
      const since = new Date(Date.now() - 60_000).toISOString();
      const dry = await runCli(['replay', '--webhook', webhookId, '--since', since, '--dry-run'], env);
      expect(dry.code).toBe(0);
      expect(dry.stdout).toBe('4\n');
      expect(dry.stderr).toContain('4 events would be replayed (dry run: nothing was sent)');
      const queuedBefore = await t.queues.counts();
      const range = await runCli(['replay', '--webhook', webhookId, '--since', since, '--status', 'pending'], env);
      expect(range.code).toBe(0);
      expect(range.stdout).toBe('4\n');
      expect(range.stderr).toMatch(/^task [0-9a-f-]{36}: replaying 4 events\n/);
      const queuedAfter = await t.queues.counts();
      expect((queuedAfter.waiting ?? 0) - (queuedBefore.waiting ?? 0)).toBe(4);
      const future = await runCli(
        ['replay', '--webhook', webhookId, '--since', since, '--status', 'delivered', '--dry-run'],
        env,
      );
      expect(future.stdout).toBe('0\n');
      // A time ago: the last hour holds the four events, the range up to two hours ago none.
      const lastHour = await runCli(['replay', '--webhook', webhookId, '--since', '1h', '--dry-run'], env);
      expect(lastHour.stdout, lastHour.stderr).toBe('4\n');
      const older = await runCli(
        ['replay', '--webhook', webhookId, '--since', '3d', '--until', '2h', '--dry-run'],
        env,
      );
      expect(older.stdout, older.stderr).toBe('0\n');
      const forms = 'an ISO 8601 time (e.g. 2026-11-24T10:00:00Z) or a time ago (30m, 2h, 3d)';
      for (const [args, message] of [
        [['--since', 'yesterday'], `hookline: --since must be ${forms}, not "yesterday"\n`],
        [['--since', '2h', '--until', '5x'], `hookline: --until must be ${forms}, not "5x"\n`],
        [['--since', '30m', '--until', '1h'], '--since is after --until'],
        [['--since', since, '--status', 'lost'], '--status: unknown lost'],
        [['--since', since, '--rate', '0'], '--rate must be a whole number from 1 to 10000'],
        [['--since', '2030-01-01T00:00:00Z', '--until', '2029-01-01T00:00:00Z'], '--since is after --until'],
      ] as const) {
        const bad = await runCli(['replay', '--webhook', webhookId, ...args], env);
        expect(bad.code).toBe(2);
        expect(bad.stderr).toContain(message);
      }

      const malformed = await runCli(['dlq', 'list', '--webhook', 'nope'], env);
      expect(malformed.code).toBe(2);
      expect(malformed.stderr).toContain('--webhook must be a webhook id (a UUID), not "nope"');
      const unknown = await runCli(['dlq', 'list', '--webhook', ids[0]!], env);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toBe(`hookline: no webhook with id ${ids[0]}\n`);
    } finally {
      await t.close();
    }
    // Twenty CLI processes, each starting Node with TypeScript from source.
  }, 180_000);
});

describe('npm start', () => {
  const root = path.resolve(import.meta.dirname, '../..');
  /** Every file under `dir` with its modification time. */
  const mtimes = (dir: string): [string, number][] =>
    readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => path.join(entry.parentPath, entry.name))
      .map((file) => [path.relative(root, file), statSync(file).mtimeMs] as [string, number])
      .sort(([a], [b]) => a.localeCompare(b));
  const outputs = () =>
    ['dist', 'packages/verify/dist', 'packages/producer/dist'].flatMap((dir) => mtimes(path.join(root, dir)));

  it('builds nothing when nothing changed: its build step writes no file again', async () => {
    const script = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: { start: string } })
      .scripts.start;
    const build = script.replace(/\s*&&\s*node dist\/cli\.js start$/, '');
    expect(build, 'npm start ends by running the built CLI').not.toBe(script);
    // As npm runs a script: in the package's folder, with its binaries on PATH.
    const run = () =>
      promisify(execFile)('sh', ['-c', build], {
        cwd: root,
        env: {
          ...process.env,
          PATH: `${path.join(root, 'node_modules/.bin')}${path.delimiter}${process.env.PATH ?? ''}`,
        },
      });
    // Another test's `npm start` may build at the same time; builds take turns.
    await withBuildLock(async () => {
      await run();
      const before = outputs();
      const startedMs = Date.now();
      const second = await run();
      console.log(`npm start's build step with nothing changed: ${Date.now() - startedMs} ms`);
      expect(outputs()).toEqual(before);
      expect(second.stdout).toContain('portal: dist/portal: up to date');
    });
  }, 420_000);
});
