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
import { cleanEnv, issueKeys } from '../helpers/processes.js';
import { TestReceiver } from '../helpers/receiver.js';
import { settles, waitFor } from '../helpers/wait.js';

/** The long variants (HOOKLINE_LONG_TESTS=1) push ≥ 10,000 events; the default is a short run. */
const LONG = process.env.HOOKLINE_LONG_TESTS === '1';
const PREFIX = 'faults';

interface Harness {
  redisPort: number;
  dir: string;
  redis?: RedisServerHandle;
  startRedis(): Promise<void>;
  receiver: TestReceiver;
  base: string;
  engine: Awaited<ReturnType<typeof startCli>>;
  eventsKey: string;
}

async function harness(
  appendFsync: 'always' | 'everysec',
  options: { redisFirst: boolean } = { redisFirst: true },
): Promise<Harness> {
  const binary = await ensureRedisServerBinary(() => undefined);
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-faults-'));
  const redisPort = await freeLoopbackPort();
  const apiPort = await freeLoopbackPort();
  const h = {
    redisPort,
    dir,
    redis: undefined as RedisServerHandle | undefined,
    async startRedis() {
      h.redis = await startRedisServer({
        binary,
        port: redisPort,
        dir,
        appendOnly: true,
        extraArgs: ['--appendfsync', appendFsync],
      });
    },
  };
  const receiver = new TestReceiver();
  await receiver.start();
  const secretKey = randomBytes(32).toString('base64');
  const env = {
    ...cleanEnv(),
    REDIS_URL: `redis://127.0.0.1:${redisPort}`,
    HOOKLINE_REDIS_PREFIX: PREFIX,
    HOOKLINE_SECRET_KEY: secretKey,
    HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
    HOOKLINE_RETRY_SCHEDULE: '0s,500ms,1s,1s,1s,1s',
    HOOKLINE_API_PORT: String(apiPort),
    HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
    HOOKLINE_WORKER_LOCK_DURATION: '3s',
    HOOKLINE_RATE_LIMIT_PER_SECOND: '0',
    HOOKLINE_LOG_FORMAT: 'json',
  };
  let engine: Awaited<ReturnType<typeof startCli>> | undefined;
  const base = `http://127.0.0.1:${apiPort}`;
  if (!options.redisFirst) {
    // Redis unreachable at start: the engine starts anyway, says so, and is not ready.
    engine = await startCli(['start'], env, /delivery worker running/);
    const notReady = await fetch(`${base}/readyz`);
    expect(notReady.status).toBe(503);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect(engine.output()).toContain('Redis connection lost; retrying in the background');
  }
  await h.startRedis();
  // Keys go straight into Redis (the operator's CLI does the same).
  const { eventsKey, vendorKey } = await issueKeys(`redis://127.0.0.1:${redisPort}`, PREFIX);
  engine ??= await startCli(['start'], env, /delivery worker running/);
  await waitFor(async () => (await fetch(`${base}/readyz`)).status === 200, 20_000, 'ready');
  const registered = await fetch(`${base}/vendors/v1/webhooks`, {
    method: 'POST',
    headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
    body: JSON.stringify({
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      callback_url: `${receiver.base}/hook`,
      secret: 'faults',
    }),
  });
  expect(registered.status).toBe(201);
  return Object.assign(h, { receiver, base, engine, eventsKey });
}

const event = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  vendor_id: 'v',
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

const receivedIds = (h: Harness) => h.receiver.requests.map((r) => String(r.headers['webhook-id']));

/** Posts one batch; resolves with the ids the engine accepted (none when the request failed). */
async function post(h: Harness, events: { event_id: string }[]): Promise<string[]> {
  try {
    const res = await fetch(`${h.base}/internal/v1/events`, {
      method: 'POST',
      headers: { 'x-api-key': h.eventsKey, 'content-type': 'application/json' },
      body: JSON.stringify({ events }),
      signal: AbortSignal.timeout(5_000),
    });
    if (res.status !== 202) return [];
    const body = (await res.json()) as { results: { event_id: string; status: string }[] };
    return body.results.filter((r) => r.status === 'accepted').map((r) => r.event_id);
  } catch {
    return [];
  }
}

/**
 * Waits for the line saying Redis is back. It is logged once every connection that failed is back:
 * each reconnects on its own back-off (up to 5 s apart), so it may follow the first delivery after
 * the outage, which needs only some of them.
 */
async function restoredLogged(h: Harness): Promise<void> {
  await waitFor(() => h.engine.output().includes('Redis connection restored'), 15_000, 'the line saying Redis is back');
}

describe('fault injection (real processes, loopback only)', () => {
  let h: Harness | undefined;
  afterEach(async () => {
    if (!h) return;
    h.engine.child.kill('SIGKILL');
    await h.engine.exited;
    await h.redis?.stop();
    await h.receiver.close();
    rmSync(h.dir, { recursive: true, force: true });
    h = undefined;
  });

  it('Redis killed and restarted mid-load (AOF appendfsync always): no accepted event is lost, the engine reconnects by itself', async () => {
    const startedMs = Date.now();
    h = await harness('always');
    const TOTAL = LONG ? 10_000 : 1_000;
    const BATCH = 50;
    const accepted = new Set<string>();
    let sent = 0;
    let restarted = false;
    const deadline = Date.now() + (LONG ? 240_000 : 60_000);
    while (sent < TOTAL && Date.now() < deadline) {
      const batch = Array.from({ length: BATCH }, event);
      sent += BATCH;
      for (const id of await post(h, batch)) accepted.add(id);
      if (!restarted && sent >= TOTAL / 3) {
        restarted = true;
        // A crash, not a clean shutdown: the AOF (fsync on every write) is all that survives.
        await h.redis?.kill();
        await new Promise((r) => setTimeout(r, 500));
        await h.startRedis();
      }
    }
    await waitFor(async () => (await fetch(`${h!.base}/readyz`)).status === 200, 20_000, 'readiness after the restart');
    // One Set per check: the receiver shares this event loop, and an O(n²) check would stall it.
    await settles(
      () => {
        const received = new Set(receivedIds(h!));
        return [...accepted].every((id) => received.has(id));
      },
      LONG ? 240_000 : 60_000,
    );
    const tally = tallyDeliveries(accepted, receivedIds(h));
    reportFault('redis-restart', tally, startedMs, { sent });
    expect(accepted.size).toBeGreaterThan(TOTAL / 2);
    expect(tally.delivered, 'every accepted event delivered').toBe(accepted.size);
  }, 300_000);

  it('Redis unreachable mid-run: readiness goes false with a clear error, then true again without a restart', async () => {
    const startedMs = Date.now();
    h = await harness('everysec');
    expect((await fetch(`${h.base}/readyz`)).status).toBe(200);
    await h.redis?.stop();
    const down = await waitFor(
      async () => {
        const res = await fetch(`${h!.base}/readyz`);
        return res.status === 503 && ((await res.json()) as { error: string });
      },
      10_000,
      'readiness false',
    );
    expect(down.error).toBe('Redis is unreachable');
    const refused = await fetch(`${h.base}/internal/v1/events`, {
      method: 'POST',
      headers: { 'x-api-key': h.eventsKey, 'content-type': 'application/json' },
      body: JSON.stringify(event()),
    });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toEqual({
      error: 'Storage is unreachable; try again shortly',
      code: 'storage_unavailable',
    });
    expect(h.engine.output()).toContain('Redis connection lost; retrying in the background');

    await h.startRedis();
    await waitFor(async () => (await fetch(`${h!.base}/readyz`)).status === 200, 20_000, 'readiness back');
    const ids = await post(h, [event()]);
    expect(ids).toHaveLength(1);
    await settles(() => h!.receiver.requests.some((r) => r.headers['webhook-id'] === ids[0]), 20_000);
    const tally = tallyDeliveries(new Set(ids), receivedIds(h));
    reportFault('redis-down-mid-run', tally, startedMs, { refused_while_down: refused.status === 503 ? 1 : 0 });
    expect(tally.delivered, 'the delivery after recovery').toBe(1);
    await restoredLogged(h);
  }, 120_000);

  it('Redis unreachable at start: the engine starts not ready, then serves and delivers once Redis answers, without a restart', async () => {
    const startedMs = Date.now();
    h = await harness('everysec', { redisFirst: false });
    const ids = await post(h, [event(), event()]);
    expect(ids).toHaveLength(2);
    await settles(() => ids.every((id) => h!.receiver.requests.some((r) => r.headers['webhook-id'] === id)), 20_000);
    const tally = tallyDeliveries(new Set(ids), receivedIds(h));
    reportFault('redis-down-at-start', tally, startedMs);
    expect(tally.delivered, 'deliveries').toBe(2);
    await restoredLogged(h);
  }, 120_000);
});
