import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ensureRedisServerBinary,
  freeLoopbackPort,
  startRedisServer,
  type RedisServerHandle,
} from '../../src/embedded/redis-server.js';
import { startCli } from '../helpers/cli.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { redisKeys } from '../../src/store/keys.js';
import { connectRedis } from '../../src/store/redis.js';
import { SecretBox } from '../../src/store/secret-box.js';
import { checkSecretKey } from '../../src/store/secret-probe.js';
import { cleanEnv, issueKeys } from '../helpers/processes.js';
import { TestReceiver } from '../helpers/receiver.js';
import { settles, waitFor } from '../helpers/wait.js';

type Engine = Awaited<ReturnType<typeof startCli>>;

const PREFIX = 'shutdown';
const GRACE_S = 2;
/** "A few seconds" past the grace period that a SIGTERM may take, whatever Redis is doing. */
const SHUTDOWN_SLACK_MS = 5_000;

/** Sends SIGTERM (or `signal`) and resolves with how long the process took to exit, and its exit code. */
async function terminate(
  engine: Engine,
  signal: NodeJS.Signals = 'SIGTERM',
): Promise<{ ms: number; code: number | null }> {
  const startedMs = Date.now();
  engine.child.kill(signal);
  const code = await Promise.race([
    engine.exited,
    new Promise<'running'>((r) => setTimeout(() => r('running'), 60_000)),
  ]);
  if (code === 'running') {
    console.log(`still running 60 s after ${signal}; its output ends with:\n${engine.output().slice(-3_000)}`);
    engine.child.kill('SIGKILL');
    return { ms: Infinity, code: null };
  }
  return { ms: Date.now() - startedMs, code };
}

/**
 * SIGTERM must end a Hookline process within HOOKLINE_SHUTDOWN_GRACE plus a few seconds whatever
 * Redis is doing, and what it could not finish must stay in the queue for another worker.
 */
describe('shutdown while Redis is unreachable (real processes, loopback only)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function redisServer(): Promise<{
    port: number;
    handle: () => RedisServerHandle | undefined;
    start(): Promise<void>;
  }> {
    const binary = await ensureRedisServerBinary(() => undefined);
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-shutdown-'));
    const port = await freeLoopbackPort();
    let handle: RedisServerHandle | undefined;
    cleanups.push(async () => {
      await handle?.stop();
      rmSync(dir, { recursive: true, force: true });
    });
    return {
      port,
      handle: () => handle,
      async start() {
        handle = await startRedisServer({
          binary,
          port,
          dir,
          appendOnly: true,
          extraArgs: ['--appendfsync', 'always'],
        });
      },
    };
  }

  async function start(args: string[], env: NodeJS.ProcessEnv, ready: RegExp): Promise<Engine> {
    const engine = await startCli(args, env, ready);
    cleanups.push(async () => {
      engine.child.kill('SIGKILL');
      await engine.exited;
    });
    return engine;
  }

  it('a worker whose Redis never answered stops within the grace period', async () => {
    const redisPort = await freeLoopbackPort();
    const env = {
      ...cleanEnv(),
      REDIS_URL: `redis://127.0.0.1:${redisPort}`,
      HOOKLINE_REDIS_PREFIX: PREFIX,
      HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64'),
      HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
      HOOKLINE_SHUTDOWN_GRACE: `${GRACE_S}s`,
      HOOKLINE_LOG_FORMAT: 'json',
    };
    const worker = await start(['worker'], env, /delivery worker running/);
    // It keeps trying to reach Redis in the background meanwhile.
    await waitFor(() => worker.output().includes('Redis connection lost'), 10_000, 'the outage noticed');
    const { ms, code } = await terminate(worker);
    console.log(`shutdown worker-redis-never-up: exited in ${ms} ms with ${code}`);
    expect(ms, 'SIGTERM to exit').toBeLessThan(GRACE_S * 1_000 + SHUTDOWN_SLACK_MS);
  }, 90_000);

  it('hookline start whose REDIS_URL never answered stops within about two seconds of Ctrl-C at the default grace, with no warning on stderr', async () => {
    const env = {
      ...cleanEnv(),
      REDIS_URL: `redis://127.0.0.1:${await freeLoopbackPort()}`,
      HOOKLINE_REDIS_PREFIX: PREFIX,
      HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64'),
      HOOKLINE_API_PORT: String(await freeLoopbackPort()),
      HOOKLINE_LOG_FORMAT: 'json',
    };
    const engine = await start(['start'], env, /delivery worker running/);
    await waitFor(() => engine.output().includes('Redis connection lost'), 10_000, 'the outage noticed');
    const { ms, code } = await terminate(engine, 'SIGINT');
    console.log(`shutdown start-redis-never-up-default-grace: exited in ${ms} ms with ${code}`);
    // It waited out the whole 30 s grace period before, for deliveries it could never have taken.
    expect(ms, 'SIGINT to exit').toBeLessThan(3_000);
    expect(code).toBe(0);
    expect(engine.output()).not.toMatch(/Warning|\n\s+at /);
  }, 90_000);

  it('an API started while Redis was down with a secret key other than the installation’s stops, in one sentence, once Redis answers', async () => {
    const redis = await redisServer();
    await redis.start();
    const url = `redis://127.0.0.1:${redis.port}`;
    const setup = connectRedis(url, { connectionName: 'test-setup', maxRetriesPerRequest: 3 });
    expect(await checkSecretKey(setup, redisKeys(PREFIX), new SecretBox(randomBytes(32)))).toBe('recorded');
    await setup.quit();
    await redis.handle()?.stop();

    const api = await start(
      ['api'],
      {
        ...cleanEnv(),
        REDIS_URL: url,
        HOOKLINE_REDIS_PREFIX: PREFIX,
        HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64'),
        HOOKLINE_API_PORT: String(await freeLoopbackPort()),
        HOOKLINE_LOG_FORMAT: 'json',
      },
      /Hookline API listening/,
    );
    await redis.start();
    const code = await Promise.race([
      api.exited,
      new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 20_000)),
    ]);
    console.log(`fault late-secret-key-check: exit ${code}; output ends with:\n${api.output().slice(-600)}`);
    expect(code).toBe(1);
    expect(api.output()).toContain(
      `hookline: HOOKLINE_SECRET_KEY does not open the webhook secrets stored in ${url} (prefix ${PREFIX}): they were sealed with another key; start with that one as HOOKLINE_SECRET_KEY\n`,
    );
  }, 90_000);

  it('an API that served requests during an outage stops within the grace period', async () => {
    const redis = await redisServer();
    await redis.start();
    const apiPort = await freeLoopbackPort();
    const { eventsKey } = await issueKeys(`redis://127.0.0.1:${redis.port}`, PREFIX);
    const env = {
      ...cleanEnv(),
      REDIS_URL: `redis://127.0.0.1:${redis.port}`,
      HOOKLINE_REDIS_PREFIX: PREFIX,
      HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64'),
      HOOKLINE_API_PORT: String(apiPort),
      HOOKLINE_SHUTDOWN_GRACE: `${GRACE_S}s`,
      HOOKLINE_LOG_FORMAT: 'json',
    };
    const api = await start(['api'], env, /Hookline API listening/);
    const base = `http://127.0.0.1:${apiPort}`;
    const post = () =>
      fetch(`${base}/internal/v1/events`, {
        method: 'POST',
        headers: { 'x-api-key': eventsKey, 'content-type': 'application/json' },
        body: JSON.stringify({
          event_type: 'EVENT_TYPE_MACHINE_UPDATED',
          vendor_id: 'v',
          data: { status: 'available', metadata: { machine_id: 'm-1' } },
        }),
      });
    expect((await post()).status).toBe(202);
    await redis.handle()?.kill();
    // Served during the outage: an honest 503, and a connection left behind in the client's pool.
    expect((await post()).status).toBe(503);
    expect((await fetch(`${base}/readyz`)).status).toBe(503);
    const { ms, code } = await terminate(api);
    console.log(`shutdown api-after-outage-requests: exited in ${ms} ms with ${code}`);
    expect(ms, 'SIGTERM to exit').toBeLessThan(GRACE_S * 1_000 + SHUTDOWN_SLACK_MS);
    expect(api.output()).toContain('"msg":"stopped"');
  }, 90_000);

  it('hookline start with Redis killed mid-run stops within the grace period, and what it had not finished is delivered by the next worker', async () => {
    const startedMs = Date.now();
    const redis = await redisServer();
    await redis.start();
    const receiver = new TestReceiver();
    await receiver.start();
    cleanups.push(() => receiver.close());
    // Slow enough that attempts are in flight when Redis dies.
    receiver.script('/hook', { status: 200, delayMs: 300 });
    const { eventsKey, vendorKey } = await issueKeys(`redis://127.0.0.1:${redis.port}`, PREFIX);
    const apiPort = await freeLoopbackPort();
    const base = `http://127.0.0.1:${apiPort}`;
    const env = async () => ({
      ...cleanEnv(),
      REDIS_URL: `redis://127.0.0.1:${redis.port}`,
      HOOKLINE_REDIS_PREFIX: PREFIX,
      HOOKLINE_SECRET_KEY: secretKey,
      HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
      HOOKLINE_API_PORT: String(apiPort),
      HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
      HOOKLINE_WORKER_CONCURRENCY: '10',
      HOOKLINE_WORKER_LOCK_DURATION: '3s',
      HOOKLINE_SHUTDOWN_GRACE: '5s',
      HOOKLINE_LOG_FORMAT: 'json',
    });
    const secretKey = randomBytes(32).toString('base64');
    const engine = await start(['start'], await env(), /delivery worker running/);
    const registered = await fetch(`${base}/vendors/v1/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
      body: JSON.stringify({ event_type: 'EVENT_TYPE_MACHINE_UPDATED', callback_url: `${receiver.base}/hook` }),
    });
    expect(registered.status).toBe(201);
    const events = Array.from({ length: 200 }, () => ({
      event_id: randomUUID(),
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      vendor_id: 'v',
      data: { status: 'available', metadata: { machine_id: 'm-1' } },
    }));
    const accepted = await fetch(`${base}/internal/v1/events`, {
      method: 'POST',
      headers: { 'x-api-key': eventsKey, 'content-type': 'application/json' },
      body: JSON.stringify({ events }),
    });
    expect(accepted.status).toBe(202);
    await waitFor(() => receiver.requests.length >= 10, 10_000, 'deliveries under way');

    await redis.handle()?.kill();
    const { ms, code } = await terminate(engine);
    console.log(`shutdown start-redis-killed-mid-run: exited in ${ms} ms with ${code}`);
    expect(ms, 'SIGTERM to exit').toBeLessThan(5_000 + SHUTDOWN_SLACK_MS);

    // Redis back on its data; the next worker picks up what the stopped engine had not finished.
    await redis.start();
    await start(['worker'], await env(), /delivery worker running/);
    const ids = new Set(events.map((e) => e.event_id));
    const receivedIds = () => receiver.requests.map((r) => String(r.headers['webhook-id']));
    await settles(() => {
      const received = new Set(receivedIds());
      return [...ids].every((id) => received.has(id));
    }, 60_000);
    const tally = tallyDeliveries(ids, receivedIds());
    reportFault('shutdown-redis-killed-mid-run', tally, startedMs, { shutdown_ms: ms });
    expect(tally.lost, 'accepted events never delivered').toBe(0);
  }, 120_000);
});
