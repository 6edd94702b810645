import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { receiverPool } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { workerProcessEnv } from '../helpers/worker.js';

const EVENTS = 20;
/** Attempts at about 0, 2 and 6 s (±20 %): the whole schedule is about 6 s. */
const SCHEDULE = '0s,2s,4s';
const SCHEDULE_MS = [0, 2_000, 4_000];
/** The production breaker's first open period. */
const OPEN_MS = 30_000;

interface Delivery {
  delivery_id: string;
  event_id: string;
  status: string;
  attempts: number;
  next_attempt_at: string | null;
}
interface Attempt {
  attempt: number;
  attempted_at: string;
  outcome: string;
}

const event = (vendorId: string) => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  vendor_id: vendorId,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

/** The JSON log lines of a process's output. */
const logLines = (output: string) =>
  output.split('\n').flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });

/**
 * A receiver that is down (500 to everything) behind the production circuit breaker (a `hookline
 * worker` process): the retry schedule stays the truth. An open circuit holds a delivery back at
 * most one open period past its due time; attempts that come due meanwhile are recorded as
 * `circuit_open` without being sent; next_attempt_at says when the delivery is really tried; a
 * replay the vendor asks for probes the endpoint at once; the circuit's changes are logged at warn.
 */
describe('an open circuit never stretches a delivery past its schedule (worker process, loopback only)', () => {
  let t: TestApp | undefined;
  const receivers = receiverPool();
  const children: Awaited<ReturnType<typeof startCli>>[] = [];
  afterEach(async () => {
    for (const child of children.splice(0)) {
      child.child.kill('SIGKILL');
      await child.exited;
    }
    await receivers.closeAll();
    await t?.close();
  });

  it('dead-letters within the schedule plus one open period, shows the real next attempt, and a replay probes at once', async () => {
    t = await testApp({ retryScheduleMs: SCHEDULE_MS });
    const receiver = await receivers.start();
    receiver.script('/hook', { status: 500 });
    const vendorKey = await t.keyFor(['vendor'], 'v');
    const created = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': vendorKey },
      payload: { event_type: 'EVENT_TYPE_MACHINE_UPDATED', callback_url: `${receiver.base}/hook` },
    });
    expect(created.statusCode).toBe(201);
    const webhookId = created.json<{ webhook_id: string }>().webhook_id;
    const worker = await startCli(
      ['worker'],
      await workerProcessEnv(t, { HOOKLINE_RETRY_SCHEDULE: SCHEDULE }),
      /delivery worker running/,
    );
    children.push(worker);
    const api = async <T>(url: string) =>
      (await t!.app.inject({ method: 'GET', url, headers: { 'x-api-key': vendorKey } })).json<T>();

    const ingestedMs = Date.now();
    await t.ingestor.ingest(
      Array.from({ length: EVENTS }, () => event('v')),
      'http',
    );

    // The circuit opens on the first burst of 500s, logged at warn with the webhook behind it.
    const opened = await waitFor(
      () => logLines(worker.output()).find((l) => l.event === 'circuit.opened'),
      15_000,
      'circuit.opened',
    );
    expect(opened).toMatchObject({ level: 40, webhookIds: [webhookId] });

    // A delivery held back by the open circuit says when it will really be tried: near the end of
    // the open period, not at its scheduled 2 s.
    const held = await waitFor(
      async () => {
        const { deliveries } = await api<{ deliveries: Delivery[] }>(
          `/vendors/v1/webhooks/${webhookId}/deliveries?limit=100`,
        );
        return deliveries.find(
          (d) =>
            d.status === 'retrying' &&
            d.next_attempt_at !== null &&
            Date.parse(d.next_attempt_at) - Date.now() > 10_000,
        );
      },
      20_000,
      'a delivery held back by the circuit',
    );
    const shownMs = Date.parse(held.next_attempt_at!);

    // Every delivery dead-lettered within its schedule plus one open period (and the jitter).
    const deadline = SCHEDULE_MS.reduce((a, b) => a + b, 0) * 1.2 + OPEN_MS + 8_000;
    await waitFor(
      async () => (await t!.redis.zcard(t!.keys.deliveries.dead(webhookId))) === EVENTS,
      deadline,
      'every delivery dead-lettered',
    );
    const deadAfterMs = Date.now() - ingestedMs;

    const { attempts } = await api<{ attempts: Attempt[] }>(
      `/vendors/v1/webhooks/${webhookId}/deliveries/${held.delivery_id}`,
    );
    const next = attempts.find((a) => a.attempt === held.attempts + 1);
    expect(next, 'the held delivery’s next attempt').toBeDefined();
    const offByMs = Date.parse(next!.attempted_at) - shownMs;
    const circuitOpenAttempts = (
      await Promise.all(
        (
          await api<{ dead_letters: Delivery[] }>(`/vendors/v1/webhooks/${webhookId}/dead-letters?limit=100`)
        ).dead_letters.map(
          async (d) =>
            (await api<{ attempts: Attempt[] }>(`/vendors/v1/webhooks/${webhookId}/deliveries/${d.delivery_id}`))
              .attempts,
        ),
      )
    )
      .flat()
      .filter((a) => a.outcome === 'circuit_open').length;
    console.log(
      `circuit: ${EVENTS} dead letters ${deadAfterMs} ms after ingest; ${circuitOpenAttempts} attempts recorded circuit_open; ${receiver.requests.length} requests reached the receiver; next_attempt_at off by ${offByMs} ms`,
    );
    expect(Math.abs(offByMs), 'next_attempt_at against the attempt that followed').toBeLessThan(5_000);
    expect(circuitOpenAttempts).toBeGreaterThan(0);
    // Attempts held by the open circuit never reached the receiver.
    expect(receiver.requests.length).toBeLessThan(EVENTS * SCHEDULE_MS.length);

    // Fixed: a replay the vendor asks for probes the still-open circuit at once, and closes it.
    receiver.script('/hook', { status: 200 });
    const [dead] = (await api<{ dead_letters: Delivery[] }>(`/vendors/v1/webhooks/${webhookId}/dead-letters?limit=1`))
      .dead_letters;
    const replayedMs = Date.now();
    const replay = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhookId}/dead-letters/${dead!.delivery_id}/replay`,
      headers: { 'x-api-key': vendorKey },
    });
    expect(replay.statusCode).toBe(202);
    const arrived = await waitFor(
      () => receiver.requests.find((r) => r.atMs >= replayedMs && r.headers['webhook-id'] === dead!.event_id),
      10_000,
      'the replay',
    );
    console.log(`circuit: replay arrived ${arrived.atMs - replayedMs} ms after it was asked for`);
    expect(arrived.atMs - replayedMs).toBeLessThan(5_000);
    const closed = await waitFor(
      () => logLines(worker.output()).find((l) => l.event === 'circuit.closed'),
      10_000,
      'circuit.closed',
    );
    expect(closed).toMatchObject({ level: 40, webhookIds: [webhookId] });
  }, 120_000);
});
