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

const PREFIX = 'outage';
const WORKERS = 2;
const SLOTS_PER_WORKER = 10;
const EVENTS = 5_000;
const BATCH = 50;

type Engine = Awaited<ReturnType<typeof startCli>>;

const event = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  vendor_id: 'v',
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

/**
 * A Redis outage of a given length under load, with the production process model: one `hookline
 * api` and two `hookline worker` processes on a Redis with `appendfsync always`, a receiver that
 * takes 20 ms per request (so attempts are in flight when Redis dies). Redis is SIGKILLed after a
 * third of the events and restarted on the same data after the outage.
 */
describe('a Redis outage under load, two worker processes (real processes, loopback only)', () => {
  let cleanup: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await cleanup?.();
    cleanup = undefined;
  });

  for (const outageMs of [10_000, 30_000]) {
    it(`repeats after a ${outageMs / 1000} s outage stay within the attempts in flight when it began, nothing is sent while Redis is down, nothing is lost`, async () => {
      const startedMs = Date.now();
      const binary = await ensureRedisServerBinary(() => undefined);
      const dir = mkdtempSync(path.join(tmpdir(), 'hookline-outage-'));
      const redisPort = await freeLoopbackPort();
      let redis: RedisServerHandle | undefined;
      const startRedis = async () => {
        redis = await startRedisServer({
          binary,
          port: redisPort,
          dir,
          appendOnly: true,
          extraArgs: ['--appendfsync', 'always'],
        });
      };
      const receiver = new TestReceiver();
      const engines: Engine[] = [];
      cleanup = async () => {
        for (const engine of engines) engine.child.kill('SIGKILL');
        await Promise.all(engines.map((e) => e.exited));
        await redis?.stop();
        await receiver.close();
        rmSync(dir, { recursive: true, force: true });
      };
      await startRedis();
      await receiver.start();
      receiver.script('/hook', { status: 200, delayMs: 20 });

      const { eventsKey, vendorKey } = await issueKeys(`redis://127.0.0.1:${redisPort}`, PREFIX);

      const apiPort = await freeLoopbackPort();
      const base = `http://127.0.0.1:${apiPort}`;
      const randomKey = randomBytes(32).toString('base64');
      const env = async () => ({
        ...cleanEnv(),
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        HOOKLINE_REDIS_PREFIX: PREFIX,
        HOOKLINE_SECRET_KEY: randomKey,
        HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
        HOOKLINE_RETRY_SCHEDULE: '0s,1s,1s,1s,1s,1s,1s,1s',
        HOOKLINE_API_PORT: String(apiPort),
        HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
        HOOKLINE_WORKER_CONCURRENCY: String(SLOTS_PER_WORKER),
        HOOKLINE_WORKER_LOCK_DURATION: '5s',
        HOOKLINE_LOG_FORMAT: 'json',
      });
      engines.push(await startCli(['api'], await env(), /Hookline API listening/));
      for (let n = 0; n < WORKERS; n++)
        engines.push(await startCli(['worker'], await env(), /delivery worker running/));

      const registered = await fetch(`${base}/vendors/v1/webhooks`, {
        method: 'POST',
        headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
        body: JSON.stringify({
          event_type: 'EVENT_TYPE_MACHINE_UPDATED',
          callback_url: `${receiver.base}/hook`,
          secret: 'outage',
        }),
      });
      expect(registered.status).toBe(201);

      const accepted = new Set<string>();
      const post = async (events: { event_id: string }[]) => {
        try {
          const res = await fetch(`${base}/internal/v1/events`, {
            method: 'POST',
            headers: { 'x-api-key': eventsKey, 'content-type': 'application/json' },
            body: JSON.stringify({ events }),
            signal: AbortSignal.timeout(5_000),
          });
          if (res.status !== 202) return;
          const body = (await res.json()) as { results: { event_id: string; status: string }[] };
          for (const r of body.results) if (r.status === 'accepted') accepted.add(r.event_id);
        } catch {
          // Not acknowledged: the producer would send it again; it is not counted as accepted.
        }
      };

      let sent = 0;
      const postUntil = async (count: number) => {
        while (sent < count) {
          await post(Array.from({ length: BATCH }, event));
          sent += BATCH;
        }
      };
      await postUntil(EVENTS / 3);
      // Deliveries are flowing: some received, more queued.
      await waitFor(() => receiver.requests.length > 100, 20_000, 'deliveries flowing');

      // A crash, not a clean shutdown: the AOF (fsync on every write) is all that survives.
      const killedAtMs = Date.now();
      await redis!.kill();
      // The outage is the fault this test injects: it lasts exactly this long, whatever happens meanwhile.
      await new Promise((r) => setTimeout(r, outageMs));
      const restartedAtMs = Date.now();
      await startRedis();
      await waitFor(
        async () => (await fetch(`${base}/readyz`).catch(() => undefined))?.status === 200,
        20_000,
        'readiness after the restart',
      );
      await postUntil(EVENTS);

      const receivedIds = () => receiver.requests.map((r) => String(r.headers['webhook-id']));
      await settles(() => {
        const received = new Set(receivedIds());
        return [...accepted].every((id) => received.has(id));
      }, 120_000);
      const tally = tallyDeliveries(accepted, receivedIds());
      // Attempts in flight when Redis died end within the receiver's 20 ms (plus the connection's
      // own time); anything reaching the receiver later in the outage was started during it.
      const sentDuringOutage = receiver.requests.filter(
        (r) => r.atMs > killedAtMs + 1_000 && r.atMs < restartedAtMs,
      ).length;
      // A repeat of an attempt in flight when Redis died was first received around the kill; any
      // other repeat would be one the outage caused beyond that bound.
      const firstReceivedMs = new Map<string, number>();
      const repeated = new Set<string>();
      for (const r of receiver.requests) {
        const id = String(r.headers['webhook-id']);
        if (firstReceivedMs.has(id)) repeated.add(id);
        else firstReceivedMs.set(id, r.atMs);
      }
      const repeatsNotInFlight = [...repeated].filter(
        (id) => Math.abs(firstReceivedMs.get(id)! - killedAtMs) > 2_000,
      ).length;
      reportFault(`redis-outage-${outageMs / 1000}s`, tally, startedMs, {
        sent,
        sent_during_outage: sentDuringOutage,
        in_flight_bound: WORKERS * SLOTS_PER_WORKER,
        repeats_not_in_flight: repeatsNotInFlight,
      });
      expect(tally.lost, 'accepted events never delivered').toBe(0);
      expect(sentDuringOutage, 'requests started while Redis was down').toBe(0);
      expect(repeatsNotInFlight, 'repeats of attempts that were not in flight when Redis died').toBe(0);
      expect(tally.duplicated, 'repeats beyond the attempts in flight at the outage').toBeLessThanOrEqual(
        WORKERS * SLOTS_PER_WORKER,
      );
    }, 240_000);
  }
});
