import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, settles, waitFor } from '../helpers/wait.js';
import { workerProcessEnv } from '../helpers/worker.js';

const events = (n: number) =>
  Array.from({ length: n }, () => ({
    event_id: randomUUID(),
    event_type: 'EVENT_TYPE_MACHINE_UPDATED',
    vendor_id: 'v',
    data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 6)}` } },
  }));

/** The ids of the events ingest accepted. */
const acceptedIds = (results: readonly { event_id?: string; status: string }[]) =>
  results.flatMap((r) => (r.status === 'accepted' && r.event_id !== undefined ? [r.event_id] : []));

describe('standalone hookline worker processes', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  const children: { kill(signal: NodeJS.Signals): boolean }[] = [];

  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await receiver.close();
    await t.close();
  });

  async function setup(): Promise<void> {
    t = await testApp({ retryScheduleMs: [0, 1_000, 1_000], queuePartitions: 2 });
    receiver = new TestReceiver();
    await receiver.start();
    receiver.script('/slow', { status: 200, delayMs: 150 });
    await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_UPDATED', callbackUrl: `${receiver.base}/slow` });
  }

  const distinctEvents = () => new Set(receiver.requests.map((r) => r.headers['webhook-id'])).size;
  const receivedIds = () => receiver.requests.map((r) => String(r.headers['webhook-id']));

  it('loses nothing when a worker is killed with SIGKILL mid-flight', async () => {
    const startedMs = Date.now();
    await setup();
    const env = await workerProcessEnv(t);
    const first = await startCli(['worker'], env, /delivery worker running/);
    children.push(first.child);
    // HOOKLINE_LONG_TESTS=1: 10,000 events; by default 200.
    const TOTAL = process.env.HOOKLINE_LONG_TESTS === '1' ? 10_000 : 200;
    if (TOTAL > 1_000) receiver.script('/slow', { status: 200, delayMs: 5 });
    const accepted = new Set<string>();
    for (let i = 0; i < TOTAL; i += 1_000) {
      const results = await t.ingestor.ingest(events(Math.min(1_000, TOTAL - i)), 'http');
      expect(results.every((r) => r.status === 'accepted')).toBe(true);
      for (const id of acceptedIds(results)) accepted.add(id);
    }
    await waitFor(() => receiver.requests.length >= Math.min(40, TOTAL / 5), 20_000, 'some deliveries');
    first.child.kill('SIGKILL');
    expect(await first.exited).toBeNull();
    const atKill = receiver.requests.length;

    const second = await startCli(['worker'], await workerProcessEnv(t), /delivery worker running/);
    children.push(second.child);
    await settles(() => distinctEvents() === TOTAL, TOTAL > 1_000 ? 300_000 : 30_000);
    const tally = tallyDeliveries(accepted, receivedIds());
    reportFault('worker-sigkill', tally, startedMs, { received_before_kill: atKill });
    expect(tally.delivered, 'every accepted event delivered').toBe(TOTAL);
    // At most the attempts in flight at the kill (concurrency 10) are repeated.
    expect(tally.duplicated).toBeLessThanOrEqual(10);
  }, 400_000);

  it('on SIGTERM stops fetching, finishes in-flight attempts, exits 0, and leaves nothing active', async () => {
    const startedMs = Date.now();
    await setup();
    const worker = await startCli(['worker'], await workerProcessEnv(t), /delivery worker running/);
    children.push(worker.child);
    // 30 ingest calls of 10: 30 batch jobs, of which the worker runs a few at a time.
    const TOTAL = 300;
    const accepted = new Set<string>();
    for (let i = 0; i < TOTAL / 10; i++)
      for (const id of acceptedIds(await t.ingestor.ingest(events(10), 'http'))) accepted.add(id);
    expect(accepted.size).toBe(TOTAL);
    await waitFor(() => receiver.requests.length >= 20, 20_000, 'some deliveries');
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    expect(worker.output()).toContain('in-flight deliveries finished');
    const counts = await t.queues.counts();
    expect(counts.active ?? 0).toBe(0);
    const deliveredBeforeStop = distinctEvents();
    expect(deliveredBeforeStop).toBeLessThan(TOTAL);

    const next = await startCli(['worker'], await workerProcessEnv(t), /delivery worker running/);
    children.push(next.child);
    await settles(() => distinctEvents() === TOTAL, 30_000);
    const tally = tallyDeliveries(accepted, receivedIds());
    reportFault('worker-sigterm', tally, startedMs, {
      active_after_exit: counts.active ?? 0,
      delivered_before_stop: deliveredBeforeStop,
    });
    expect(tally.delivered, 'the rest delivered by the next worker').toBe(TOTAL);
    expect(receiver.requests.length).toBe(TOTAL);
  }, 90_000);

  it('shares the queues among three workers: every event delivered once, and a kill loses nothing', async () => {
    const startedMs = Date.now();
    await setup();
    receiver.script('/slow', { status: 200, delayMs: 20 });
    const workers = await Promise.all(
      // At debug, each delivered attempt is a line: how each worker's share is counted below.
      [1, 2, 3].map(async () =>
        startCli(['worker'], await workerProcessEnv(t, { HOOKLINE_LOG_LEVEL: 'debug' }), /delivery worker running/),
      ),
    );
    children.push(...workers.map((w) => w.child));
    // Ingested 10 at a time, so there are many batch jobs to share.
    const FIRST = 300;
    const accepted = new Set<string>();
    for (let i = 0; i < FIRST / 10; i++)
      for (const id of acceptedIds(await t.ingestor.ingest(events(10), 'http'))) accepted.add(id);
    await waitFor(() => distinctEvents() === FIRST, 30_000, 'first batch delivered');
    await queuesDrained(t.queues);
    // Normal operation: no event delivered twice.
    expect(receiver.requests.length).toBe(FIRST);
    const perWorker = new Map<string, number>();
    for (const w of workers) {
      const pid = String(w.child.pid);
      const lines = w
        .output()
        .split('\n')
        .filter((l) => l.includes('"delivery.attempted"'));
      perWorker.set(pid, lines.length);
    }
    // Every worker took part.
    expect([...perWorker.values()].every((n) => n > 0)).toBe(true);

    receiver.script('/slow', { status: 200, delayMs: 150 });
    const SECOND = 200;
    for (let i = 0; i < SECOND / 10; i++)
      for (const id of acceptedIds(await t.ingestor.ingest(events(10), 'http'))) accepted.add(id);
    expect(accepted.size).toBe(FIRST + SECOND);
    await waitFor(() => distinctEvents() >= FIRST + 30, 20_000, 'second batch under way');
    workers[0]!.child.kill('SIGKILL');
    await settles(() => distinctEvents() === FIRST + SECOND, 40_000);
    const tally = tallyDeliveries(accepted, receivedIds());
    // split: how the first batch (before the kill) spread over the three workers.
    reportFault('worker-sigkill-of-three', tally, startedMs, { split: [...perWorker.values()].join('/') });
    expect(tally.delivered, 'second batch delivered after the kill').toBe(FIRST + SECOND);
    expect(tally.duplicated).toBeLessThanOrEqual(10);
  }, 120_000);

  it('a worker killed while deliveries wait behind its first contact: they go out within the lock duration', async () => {
    // A new endpoint whose first request takes 2.5 s: the rest of the burst is deferred behind it,
    // and the worker is killed before that answer wakes them. Their deferral, not the killed
    // worker, brings them back: within the lock duration (8 s here), the time after which
    // everything else a killed worker held runs again, not two timeouts and an open period later.
    const LOCK_MS = 8_000;
    const startedMs = Date.now();
    t = await testApp({ retryScheduleMs: [0, 60_000], queuePartitions: 1 });
    receiver = new TestReceiver();
    await receiver.start();
    receiver.script('/first', { status: 200, delayMs: 2_500 }, { status: 200 });
    await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_UPDATED', callbackUrl: `${receiver.base}/first` });
    const env = await workerProcessEnv(t, { HOOKLINE_WORKER_LOCK_DURATION: '8s', HOOKLINE_DELIVERY_TIMEOUT: '3s' });
    const first = await startCli(['worker'], env, /delivery worker running/);
    children.push(first.child);
    const accepted = new Set(acceptedIds(await t.ingestor.ingest(events(5), 'http')));
    const ingestedMs = Date.now();
    const deferred = async () =>
      (await t.deliveryLog.recent((await t.webhooks.list('v'))[0]!.id, 10)).filter(
        (d) => d.status === 'pending' && d.nextAttemptAtMs !== undefined,
      );
    const held = await waitFor(
      async () => ((await deferred()).length >= 4 ? deferred() : undefined),
      10_000,
      'the deferrals',
    );
    first.child.kill('SIGKILL');
    expect(await first.exited).toBeNull();
    const second = await startCli(
      ['worker'],
      await workerProcessEnv(t, { HOOKLINE_WORKER_LOCK_DURATION: '8s' }),
      /delivery worker running/,
    );
    children.push(second.child);
    const inTime = await settles(() => distinctEvents() === 5, LOCK_MS + 6_000);
    const tally = tallyDeliveries(accepted, receivedIds());
    reportFault('worker-sigkill-behind-first-contact', tally, startedMs, {
      deferred_for_ms: Math.max(...held.map((d) => d.nextAttemptAtMs! - ingestedMs)),
      delivered_after_ms: Date.now() - ingestedMs,
    });
    expect(inTime, 'every delivery within the lock duration of the kill').toBe(true);
    expect(tally.delivered).toBe(5);
    for (const d of held) expect(d.nextAttemptAtMs! - d.acceptedAtMs).toBeLessThanOrEqual(LOCK_MS + 1_000);
  }, 60_000);
});
