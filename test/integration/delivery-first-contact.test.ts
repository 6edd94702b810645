import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { receiverPool, type ReceivedRequest } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const EVENTS = 300;
/** The production attempt timeout: what a delivery deferred behind a first contact used to wait for. */
const TIMEOUT_MS = 15_000;
/** Longer than the batch's 250 ms hold, so the burst behind the first contact is deferred. */
const FIRST_ANSWER_MS = 800;

const event = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_CREATED',
  vendor_id: 'v',
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

/** The longest pause between two consecutive receptions. */
function longestGapMs(requests: readonly ReceivedRequest[]): number {
  const times = requests.map((r) => r.atMs).sort((a, b) => a - b);
  return times.slice(1).reduce((gap, atMs, i) => Math.max(gap, atMs - times[i]!), 0);
}

/**
 * A healthy receiver's first contact that takes longer than a batch waits: the burst behind it must
 * go out as soon as it answers, not one attempt timeout later; and an endpoint that answered before
 * is no first contact for a worker that starts afresh.
 */
describe('first contact with a healthy receiver (real Redis, receiver on 127.0.0.1)', () => {
  let t: TestApp | undefined;
  const workers: TestWorker[] = [];
  const receivers = receiverPool();
  afterEach(async () => {
    for (const worker of workers.splice(0)) await worker.close();
    await receivers.closeAll();
    await t?.close();
  });

  it('deliveries deferred behind a slow first answer go out as soon as it comes, not after the attempt timeout', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    receiver.script('/hook', { status: 200, delayMs: FIRST_ANSWER_MS }, { status: 200 });
    await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${receiver.base}/hook` });
    const worker = await startTestWorker(t, { workerConcurrency: 20, deliveryTimeoutMs: TIMEOUT_MS });
    workers.push(worker);

    const startedMs = Date.now();
    await t.ingestor.ingest(Array.from({ length: EVENTS }, event), 'http');
    await waitFor(() => receiver.requests.length >= EVENTS, TIMEOUT_MS + 10_000, 'every delivery');
    const lastMs = Math.max(...receiver.requests.map((r) => r.atMs)) - startedMs;
    const deferred = worker.outcomes.filter((o) => o.kind === 'deferred').length;
    const gapMs = longestGapMs(receiver.requests);
    console.log(
      `first contact: ${EVENTS} delivered, the last ${lastMs} ms after ingest; ${deferred} deferred behind the first answer; longest gap ${gapMs} ms`,
    );
    // The burst waited for the first answer, and was deferred while it did: the case this is about.
    expect(deferred).toBeGreaterThan(0);
    expect(lastMs).toBeLessThan(FIRST_ANSWER_MS + 4_000);
    expect(gapMs).toBeLessThan(3_000);
  });

  it('a worker that starts afresh knows the endpoints other workers saw answer: no first-contact hold, no deferral', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${receiver.base}/hook` });
    const first = await startTestWorker(t, { workerConcurrency: 20, deliveryTimeoutMs: TIMEOUT_MS });
    await t.ingestor.ingest([event()], 'http');
    await waitFor(() => receiver.requests.length === 1, 10_000, 'the first delivery');
    await first.close();

    // A restarted worker (a deploy), while the receiver is slow to answer the first request it gets.
    receiver.script('/hook', { status: 200, delayMs: FIRST_ANSWER_MS }, { status: 200 });
    const restarted = await startTestWorker(t, { workerConcurrency: 20, deliveryTimeoutMs: TIMEOUT_MS });
    workers.push(restarted);
    const startedMs = Date.now();
    await t.ingestor.ingest(Array.from({ length: EVENTS }, event), 'http');
    await waitFor(() => receiver.requests.length >= EVENTS + 1, TIMEOUT_MS + 10_000, 'every delivery');
    const lastMs = Math.max(...receiver.requests.map((r) => r.atMs)) - startedMs;
    const deferred = restarted.outcomes.filter((o) => o.kind === 'deferred').length;
    console.log(
      `known endpoint after a restart: ${EVENTS} delivered, the last ${lastMs} ms after ingest; ${deferred} deferred`,
    );
    expect(deferred).toBe(0);
    expect(lastMs).toBeLessThan(FIRST_ANSWER_MS + 3_000);
  });
});
