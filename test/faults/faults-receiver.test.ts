import { randomBytes, randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { TestReceiver } from '../helpers/receiver.js';
import { settles, waitFor } from '../helpers/wait.js';
import { startTestWorker, workerProcessEnv, type TestWorker } from '../helpers/worker.js';

/** The long variants (HOOKLINE_LONG_TESTS=1) push 5,000 events; the default is 500. */
const LONG = process.env.HOOKLINE_LONG_TESTS === '1';
const TOTAL = LONG ? 5_000 : 500;
/** One webhook per vendor, each on its own receiver port: its own endpoint, so its own circuit breaker. */
const VENDORS = ['v0', 'v1'];
/** A compressed retry schedule: five attempts over about 15 s (each delay ±20 %). */
const SCHEDULE_MS = [0, 1_000, 2_000, 4_000, 8_000];
/** Where the receiver stays down past every attempt: four attempts over about 2 s. */
const SHORT_SCHEDULE_MS = [0, 250, 500, 1_000];
/**
 * Where the receiver must be back before the attempts run out: at least 48 s of attempts even with
 * the jitter, while refusing the first attempts of 5,000 deliveries takes up to about 15 s.
 */
const LONG_SCHEDULE_MS = [0, 2_000, 4_000, 8_000, 16_000, 30_000];
/** How long a worker trusts its cached copy of a webhook (docs/delivery-semantics.md, "How changes reach every process"). */
const WEBHOOK_CACHE_MS = 2_000;
/** A breaker that never opens: every attempt reaches the (down) receiver. */
const BREAKER_SET_ASIDE = {
  failureThreshold: Number.MAX_SAFE_INTEGER,
  timeoutThreshold: Number.MAX_SAFE_INTEGER,
  minAttempts: Number.MAX_SAFE_INTEGER,
};
/** Attempts in flight in one `hookline worker` process. */
const PROCESS_CONCURRENCY = 10;

interface Hook {
  vendorId: string;
  vendorKey: string;
  webhookId: string;
  /** The loopback port the webhook points at; nothing listens there until the receiver starts. */
  port: number;
  receiver: TestReceiver;
  verifier: StandardWebhook;
  /** Requests of the receiver already checked, and the event ids of those whose signature verified. */
  checked: number;
  verified: string[];
  unverified: number;
}

interface Task {
  status: string;
  fail_reason: string | null;
  progress?: { total: number; done: number };
}

const event = (vendorId: string) => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  vendor_id: vendorId,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const seconds = (ms: number) => Number((ms / 1000).toFixed(1));

/** The sum of a metric's series in a Prometheus text exposition. */
function metricSum(text: string, name: string): number {
  return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].reduce(
    (sum, m) => sum + Number(m[1]),
    0,
  );
}

describe('fault injection: a receiver fully down, then back (loopback only)', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  let hooks: Hook[] = [];
  let taskKey = '';
  const children: Awaited<ReturnType<typeof startCli>>[] = [];

  afterEach(async () => {
    for (const child of children.splice(0)) {
      child.child.kill('SIGKILL');
      await child.exited;
    }
    await worker?.close();
    worker = undefined;
    for (const hook of hooks) await hook.receiver.close().catch(() => undefined);
    hooks = [];
    await t?.close();
    t = undefined;
  });

  /** The app with a retry schedule, and one webhook per vendor registered through the API, each on a port where nothing listens. */
  async function setup(retryScheduleMs: readonly number[] = SCHEDULE_MS): Promise<TestApp> {
    const app = await testApp({ retryScheduleMs, queuePartitions: 2 });
    t = app;
    taskKey = await app.keyFor(['tasks:read']);
    for (const vendorId of VENDORS) {
      const vendorKey = await app.keyFor(['vendor'], vendorId);
      const port = await freeLoopbackPort();
      const secret = `whsec_${randomBytes(24).toString('base64')}`;
      const res = await app.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': vendorKey },
        payload: { event_type: 'EVENT_TYPE_MACHINE_UPDATED', callback_url: `http://127.0.0.1:${port}/hook`, secret },
      });
      expect(res.statusCode).toBe(201);
      const receiver = new TestReceiver();
      hooks.push({
        vendorId,
        vendorKey,
        webhookId: res.json<{ webhook_id: string }>().webhook_id,
        port,
        receiver,
        verifier: new StandardWebhook(secret),
        checked: 0,
        verified: [],
        unverified: 0,
      });
    }
    return app;
  }

  /** A `hookline worker` process with the same schedule, a 2 s delivery timeout and the production circuit breaker. */
  async function startWorkerProcess(app: TestApp, extra: Record<string, string> = {}) {
    const env = await workerProcessEnv(app, {
      HOOKLINE_RETRY_SCHEDULE: SCHEDULE_MS.map((ms) => `${ms}ms`).join(','),
      HOOKLINE_DELIVERY_TIMEOUT: '2s',
      HOOKLINE_WORKER_CONCURRENCY: String(PROCESS_CONCURRENCY),
      ...extra,
    });
    const child = await startCli(['worker'], env, /delivery worker running/);
    children.push(child);
    return {
      ...child,
      metrics: async () => (await fetch(`http://127.0.0.1:${env.HOOKLINE_METRICS_PORT}/metrics`)).text(),
    };
  }

  /** Ingests `n` events spread over the vendors, in batches; every one must be accepted. */
  async function ingest(app: TestApp, n: number): Promise<Set<string>> {
    const accepted = new Set<string>();
    for (let i = 0; i < n; i += 500) {
      const batch = Array.from({ length: Math.min(500, n - i) }, (_, j) => event(VENDORS[(i + j) % VENDORS.length]!));
      for (const r of await app.ingestor.ingest(batch, 'http'))
        if (r.status === 'accepted' && r.event_id !== undefined) accepted.add(r.event_id);
    }
    expect(accepted.size).toBe(n);
    return accepted;
  }

  /** The event id of every reception so far whose signature the standardwebhooks verifier accepts (checked once each). */
  function receptions(): { eventIds: string[]; unverified: number } {
    for (const hook of hooks) {
      for (; hook.checked < hook.receiver.requests.length; hook.checked += 1) {
        const { body, headers } = hook.receiver.requests[hook.checked]!;
        try {
          hook.verifier.verify(body, {
            'webhook-id': String(headers['webhook-id']),
            'webhook-timestamp': String(headers['webhook-timestamp']),
            'webhook-signature': String(headers['webhook-signature']),
          });
          hook.verified.push(String(headers['webhook-id']));
        } catch {
          hook.unverified += 1;
        }
      }
    }
    return { eventIds: hooks.flatMap((h) => h.verified), unverified: hooks.reduce((n, h) => n + h.unverified, 0) };
  }
  const allDelivered = (accepted: ReadonlySet<string>) => () => {
    const received = new Set(receptions().eventIds);
    return [...accepted].every((id) => received.has(id));
  };

  /** Dead letters waiting for a replay, over every webhook (the engine's own dead-letter sets). */
  async function deadLetters(app: TestApp): Promise<number> {
    const counts = await Promise.all(hooks.map((hook) => app.redis.zcard(app.keys.deliveries.dead(hook.webhookId))));
    return counts.reduce((a, b) => a + b, 0);
  }

  /** Starts every receiver on the port its webhook points at. */
  async function receiversBack(): Promise<void> {
    for (const hook of hooks) await hook.receiver.start(hook.port);
  }

  /** Replays every dead letter of each webhook through the admin API and polls each task until it ends. */
  /**
   * Replays every webhook's dead letters, all at once, and waits for each task to end: a replay
   * task ends when every replayed delivery has an outcome, not when they are queued.
   */
  async function replayAll(app: TestApp): Promise<Task[]> {
    const taskIds: string[] = [];
    for (const hook of hooks) {
      const res = await app.app.inject({
        method: 'POST',
        url: `/vendors/v1/webhooks/${hook.webhookId}/dead-letters/replay`,
        headers: { 'x-api-key': hook.vendorKey },
      });
      expect(res.statusCode).toBe(202);
      taskIds.push(res.json<{ task_id: string }>().task_id);
    }
    const tasks: Task[] = [];
    for (const [i, taskId] of taskIds.entries()) {
      tasks.push(
        await waitFor(
          async () => {
            const task = (
              await app.app.inject({
                method: 'GET',
                url: `/rental/v1/tasks/${taskId}`,
                headers: { 'x-api-key': taskKey },
              })
            ).json<Task>();
            return (task.status === 'success' || task.status === 'failed') && task;
          },
          LONG ? 240_000 : 90_000,
          `replay task of ${hooks[i]!.vendorId}`,
        ),
      );
    }
    return tasks;
  }

  /** Each webhook as its vendor sees it: enabled, or why not. */
  async function webhookStates(app: TestApp): Promise<string[]> {
    const states: string[] = [];
    for (const hook of hooks) {
      const res = await app.app.inject({
        method: 'GET',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': hook.vendorKey },
      });
      const found = res
        .json<{ webhooks: { webhook_id: string; enabled: boolean; disabled_reason?: string }[] }>()
        .webhooks.find((w) => w.webhook_id === hook.webhookId);
      states.push(found?.enabled ? 'enabled' : (found?.disabled_reason ?? 'missing'));
    }
    return states;
  }

  const firstAttemptReceptions = () =>
    hooks.flatMap((h) => h.receiver.requests).filter((r) => r.headers['x-webhook-attempt'] === '1').length;

  it(
    'receiver down until every attempt is spent: dead letters; back on the same port, a bulk replay through the admin API delivers every event',
    async () => {
      const startedMs = Date.now();
      const app = await setup(SHORT_SCHEDULE_MS);
      // The in-process engine, so the breaker can be set aside: with it (see the tests below) a
      // receiver that is down gets one probe per open period, and a schedule is not spent in seconds.
      worker = await startTestWorker(app, {
        workerConcurrency: 20,
        deliveryTimeoutMs: 1_000,
        breaker: BREAKER_SET_ASIDE,
      });
      const accepted = await ingest(app, TOTAL);

      const allDead = await settles(async () => (await deadLetters(app)) === accepted.size, LONG ? 120_000 : 45_000);
      const deadLettered = await deadLetters(app);
      const refused = worker.outcomes.filter((o) => o.kind === 'attempted' && o.outcome === 'connect').length;
      const sample = await Promise.all(
        hooks.map(
          async (hook) =>
            (
              await app.app.inject({
                method: 'GET',
                url: `/vendors/v1/webhooks/${hook.webhookId}/dead-letters?limit=100`,
                headers: { 'x-api-key': hook.vendorKey },
              })
            ).json<{ dead_letters: { status: string; attempts: number; last_outcome: string }[] }>().dead_letters,
        ),
      );

      await receiversBack();
      const tasks = await replayAll(app);
      await settles(allDelivered(accepted), LONG ? 120_000 : 30_000);
      const { eventIds, unverified } = receptions();
      const tally = tallyDeliveries(accepted, eventIds);
      const replayed = tasks.reduce((n, task) => n + (task.progress?.done ?? 0), 0);
      reportFault('receiver-down-dead-lettered-replayed', tally, startedMs, {
        dead_lettered: deadLettered,
        replayed,
        refused_attempts: refused,
        unverified,
      });

      expect(allDead, 'every accepted event dead-lettered while the receiver was down').toBe(true);
      // Each delivery spent the whole schedule on refused connections before it was dead-lettered.
      expect(refused).toBe(accepted.size * SHORT_SCHEDULE_MS.length);
      expect(sample.flat()).toHaveLength(100 * hooks.length);
      for (const d of sample.flat())
        expect(d).toMatchObject({ status: 'dead', attempts: SHORT_SCHEDULE_MS.length, last_outcome: 'connect' });
      for (const task of tasks) expect(task).toMatchObject({ status: 'success', fail_reason: null });
      expect(replayed).toBe(accepted.size);
      expect(tally).toEqual({ accepted: TOTAL, delivered: TOTAL, duplicated: 0, lost: 0 });
      expect(unverified).toBe(0);
      expect(await deadLetters(app)).toBe(0);
      // The sustained-failure window (5 days) never came into play.
      expect(await webhookStates(app)).toEqual(hooks.map(() => 'enabled'));
    },
    LONG ? 300_000 : 90_000,
  );

  it(
    'receiver down, back before the attempts run out: the retries deliver every event, nothing is dead-lettered or replayed',
    async () => {
      const startedMs = Date.now();
      const app = await setup(LONG_SCHEDULE_MS);
      worker = await startTestWorker(app, {
        workerConcurrency: 20,
        deliveryTimeoutMs: 1_000,
        breaker: BREAKER_SET_ASIDE,
      });
      const ingestMs = Date.now();
      const accepted = await ingest(app, TOTAL);

      // Down until every delivery has been refused at least once.
      const refusedDeliveries = () =>
        new Set(
          worker!.outcomes.flatMap((o) =>
            o.kind === 'attempted' && o.outcome === 'connect' ? [o.job.deliveryId] : [],
          ),
        ).size;
      const allRefused = await settles(() => refusedDeliveries() === accepted.size, LONG ? 60_000 : 20_000);
      const refused = worker.outcomes.filter((o) => o.kind === 'attempted' && o.outcome === 'connect').length;
      const downMs = Date.now() - ingestMs;
      await receiversBack();

      await settles(allDelivered(accepted), LONG ? 90_000 : 30_000);
      const { eventIds, unverified } = receptions();
      const tally = tallyDeliveries(accepted, eventIds);
      const deadLettered = await deadLetters(app);
      reportFault('receiver-down-retries-deliver', tally, startedMs, {
        dead_lettered: deadLettered,
        refused_attempts: refused,
        down_s: seconds(downMs),
        unverified,
      });

      expect(allRefused, 'every delivery refused at least once while the receiver was down').toBe(true);
      expect(tally).toEqual({ accepted: TOTAL, delivered: TOTAL, duplicated: 0, lost: 0 });
      // Every event went through on a retry, none on its first attempt.
      expect(firstAttemptReceptions()).toBe(0);
      expect(unverified).toBe(0);
      expect(deadLettered).toBe(0);
      expect(await webhookStates(app)).toEqual(hooks.map(() => 'enabled'));
    },
    LONG ? 240_000 : 60_000,
  );

  it(
    'receiver stopped under load (a worker process, production breaker): deliveries wait in the queue and go out after the probe, none dead-lettered or replayed',
    async () => {
      const startedMs = Date.now();
      const app = await setup();
      await receiversBack();
      for (const hook of hooks) hook.receiver.script('/hook', { status: 200, delayMs: LONG ? 5 : 20 });
      const engine = await startWorkerProcess(app);
      const accepted = await ingest(app, TOTAL);
      await waitFor(() => receptions().eventIds.length >= TOTAL / 5, 30_000, 'some deliveries');

      // Stopped mid-load: answers in flight are cut, and further connections refused.
      for (const hook of hooks) await hook.receiver.close();
      const stoppedMs = Date.now();
      const receivedBeforeStop = receptions().eventIds.length;
      const circuitsOpen = await waitFor(
        async () => {
          const open = metricSum(await engine.metrics(), 'hookline_circuits_open');
          return open === hooks.length && open;
        },
        20_000,
        'a circuit open per receiver',
      );
      await sleep(3_000);
      await receiversBack();
      const backMs = Date.now();

      // The circuit opened for 30 s: the parked deliveries go out once its probe succeeds.
      await settles(allDelivered(accepted), LONG ? 180_000 : 60_000);
      const recoveredMs = Date.now() - backMs;
      const { eventIds, unverified } = receptions();
      const tally = tallyDeliveries(accepted, eventIds);
      const deadLettered = await deadLetters(app);
      const deferred = metricSum(await engine.metrics(), 'hookline_deliveries_deferred_total');
      reportFault('receiver-stopped-under-load', tally, startedMs, {
        received_before_stop: receivedBeforeStop,
        down_s: seconds(backMs - stoppedMs),
        circuits_opened: circuitsOpen,
        deferred,
        recovered_after_s: seconds(recoveredMs),
        dead_lettered: deadLettered,
        unverified,
      });

      expect(tally.delivered, 'every accepted event delivered').toBe(TOTAL);
      expect(tally.lost).toBe(0);
      // Only answers cut by the stop are delivered again: at most the attempts in flight then.
      expect(tally.duplicated).toBeLessThanOrEqual(PROCESS_CONCURRENCY);
      expect(unverified).toBe(0);
      expect(deadLettered).toBe(0);
      expect(deferred).toBeGreaterThan(0);
      expect(await webhookStates(app)).toEqual(hooks.map(() => 'enabled'));
    },
    LONG ? 300_000 : 120_000,
  );

  it(
    'receiver down past the sustained-failure window (a worker process): webhooks disabled as failing, deliveries dead-lettered; re-enabled and replayed, every event delivered',
    async () => {
      const startedMs = Date.now();
      const app = await setup();
      // The breaker parks the deliveries after five refusals; its probe 30 s later fails past the
      // 2 s window and disables the webhook; each parked delivery, when it next comes up, goes to the
      // dead letters.
      const engine = await startWorkerProcess(app, { HOOKLINE_SUSTAINED_FAILURE_WINDOW: '2s' });
      const accepted = await ingest(app, TOTAL);

      const allDead = await settles(async () => (await deadLetters(app)) === accepted.size, LONG ? 240_000 : 150_000);
      const deadLettered = await deadLetters(app);
      const deadAfterMs = Date.now() - startedMs;
      const statesWhileDown = await webhookStates(app);

      await receiversBack();
      for (const hook of hooks) {
        const res = await app.app.inject({
          method: 'PATCH',
          url: `/vendors/v1/webhooks/${hook.webhookId}`,
          headers: { 'x-api-key': hook.vendorKey },
          payload: { enabled: true },
        });
        expect(res.statusCode).toBe(200);
      }
      // Workers see the change within their webhook cache's lifetime; a replay before that is dead-lettered again.
      await sleep(WEBHOOK_CACHE_MS + 500);
      const replayStartMs = Date.now();
      const tasks = await replayAll(app);
      await settles(allDelivered(accepted), LONG ? 240_000 : 150_000);
      const recoveredMs = Date.now() - replayStartMs;
      const { eventIds, unverified } = receptions();
      const tally = tallyDeliveries(accepted, eventIds);
      const replayed = tasks.reduce((n, task) => n + (task.progress?.done ?? 0), 0);
      const disabledBy = metricSum(await engine.metrics(), 'hookline_webhooks_disabled_total');
      reportFault('receiver-down-webhooks-disabled', tally, startedMs, {
        disabled: disabledBy,
        dead_lettered: deadLettered,
        dead_after_s: seconds(deadAfterMs),
        replayed,
        recovered_after_s: seconds(recoveredMs),
        unverified,
      });

      expect(allDead, 'every accepted event dead-lettered while the receiver was down').toBe(true);
      expect(statesWhileDown).toEqual(hooks.map(() => 'failing'));
      expect(disabledBy).toBe(hooks.length);
      for (const task of tasks) expect(task).toMatchObject({ status: 'success', fail_reason: null });
      expect(tasks.map((task) => task.progress?.total)).toEqual(tasks.map((task) => task.progress?.done));
      expect(replayed).toBe(accepted.size);
      expect(tally).toEqual({ accepted: TOTAL, delivered: TOTAL, duplicated: 0, lost: 0 });
      expect(unverified).toBe(0);
      expect(await deadLetters(app)).toBe(0);
      expect(await webhookStates(app)).toEqual(hooks.map(() => 'enabled'));
    },
    LONG ? 600_000 : 300_000,
  );
});
