import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import { partitionOf } from '../../src/delivery/jobs.js';
import { deliveryIdFor } from '../../src/domain/ids.js';
import { testApp, testEngine, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { capturedLogs } from '../helpers/logs.js';
import { firstAttemptBatches } from '../helpers/first-attempts.js';
import { receiverPool } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, testWorkerConfig, type TestWorker } from '../helpers/worker.js';

const EVENT_TYPE = 'EVENT_TYPE_MACHINE_CREATED';

/** A delivery as ingest would queue it. */
function delivery(webhookId: string, vendorId: string): DeliverJob {
  const eventId = randomUUID();
  return {
    deliveryId: deliveryIdFor(eventId, webhookId),
    eventId,
    eventType: EVENT_TYPE,
    vendorId,
    webhookId,
    body: JSON.stringify({ version: '1.0', event_id: eventId, event_type: EVENT_TYPE, data: {} }),
    acceptedAtMs: Date.now(),
  };
}

/** What BullMQ hands the processor: the batch and how often it was started. */
const batchJob = (deliveries: DeliverJob[], attemptsStarted: number) =>
  ({ data: { deliveries }, attemptsStarted, attemptsMade: 0 }) as unknown as Job;

describe('batch delivery jobs (real Redis, real receivers on 127.0.0.1)', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  const receivers = receiverPool();
  const closers: (() => Promise<void>)[] = [];

  afterEach(async () => {
    await worker?.close();
    worker = undefined;
    for (const close of closers.splice(0)) await close();
    await receivers.closeAll();
    await t?.close();
  });

  const receiver = () => receivers.start();

  /** A worker engine for the app that is never started: the test runs its batch processor on jobs of its own. */
  async function idleWorker(app: TestApp, overrides: { slowAfterMs?: number; deliveryTimeoutMs?: number } = {}) {
    const engine = await testEngine(
      testWorkerConfig(app, {
        workerConcurrency: 10,
        deliveryTimeoutMs: overrides.deliveryTimeoutMs ?? 1_000,
        sustainedFailureWindowMs: 24 * 3_600_000,
      }),
      {
        role: 'worker',
        worker: { webhookCacheTtlMs: 0, breaker: { slowAfterMs: overrides.slowAfterMs ?? 2_000 } },
      },
    );
    closers.push(() => engine.close(2_000).then(() => undefined));
    return engine.worker!;
  }

  it('appends an ingest batch to a first-attempt stream as a few batches and delivers every event exactly once', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000], queuePartitions: 2 });
    const r = await receiver();
    const created = await t.webhooks.create('v-batch', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/in` });
    if (!created.ok) throw new Error('webhook not created');
    const EVENTS = 250;
    await t.ingestor.ingest(
      Array.from({ length: EVENTS }, () => machineEvent('v-batch')),
      'http',
    );
    // One webhook → one partition → ceil(250 / 100) = 3 stream entries for 250 deliveries, no job.
    const partition = partitionOf(created.webhook.id, 2);
    expect(await t.redis.xlen(t.keys.firstAttempts.streamOf(partition))).toBe(3);
    expect(await t.redis.xlen(t.keys.firstAttempts.streamOf(1 - partition))).toBe(0);
    expect((await firstAttemptBatches(t)).map((batch) => batch.length)).toEqual([100, 100, 50]);
    expect(await t.queues.counts()).toMatchObject({ waiting: 3, active: 0, delayed: 0 });

    worker = await startTestWorker(t);
    await waitFor(() => r.requests.length >= EVENTS, 20_000, 'every delivery');
    // Nothing is left that could send one again.
    await queuesDrained(t.queues);
    const ids = r.requests.map((q) => String(q.headers['webhook-id']));
    expect(new Set(ids).size).toBe(EVENTS);
    expect(ids).toHaveLength(EVENTS);
    // Delivered first attempts are journaled, one entry per flush, and shown once the journal is
    // projected: no key of their own.
    await waitFor(
      async () =>
        (await t!.deliveryLog.recent(created.webhook.id, EVENTS)).filter((d) => d.status === 'delivered').length ===
        EVENTS,
      5_000,
      'every delivery shown as delivered',
    );
    expect(await t.redis.keys(`${t.keys.deliveries.record(created.webhook.id, '')}*`)).toEqual([]);
  });

  it('sends a first attempt the body its webhook’s event log holds, and nothing for an event erased while it waited', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000], queuePartitions: 2 });
    const r = await receiver();
    const created = await t.webhooks.create('v-erased', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/in` });
    if (!created.ok) throw new Error('webhook not created');
    const webhookId = created.webhook.id;
    const events = Array.from({ length: 3 }, () => machineEvent('v-erased'));
    await t.ingestor.ingest(events, 'http');
    // The stream entry refers to the log: the body went to Redis once.
    const partition = partitionOf(webhookId, 2);
    const [[, fields]] = (await t.redis.xrange(t.keys.firstAttempts.streamOf(partition), '-', '+')) as [
      [string, string[]],
    ];
    expect(fields.filter((_, i) => i % 2 === 0)).toEqual(['l', 'l', 'l']);
    const erased = events[1]!.event_id;
    await t.eraser.eraseEvent(erased);

    const logs = capturedLogs();
    worker = await startTestWorker(t, { logger: logs.logger() });
    await waitFor(() => r.requests.length >= 2, 10_000, 'the two events not erased');
    await waitFor(
      async () => (await t!.redis.xlen(t!.keys.firstAttempts.streamOf(partition))) === 0,
      5_000,
      'the entry done',
    );
    await waitFor(
      () => logs.lines.some((line) => line.event === 'delivery.dropped'),
      5_000,
      'the erased event’s delivery dropped',
    );
    // Each sent with its own body, signed; the erased one never sent, and nothing of it recorded.
    expect(r.requests.map((q) => (JSON.parse(q.body) as { event_id: string }).event_id).sort()).toEqual(
      [events[0]!.event_id, events[2]!.event_id].sort(),
    );
    expect(r.requests.every((q) => typeof q.headers['webhook-signature'] === 'string')).toBe(true);
    const erasedDelivery = deliveryIdFor(erased, webhookId);
    expect(logs.lines.find((line) => line.event === 'delivery.dropped')).toMatchObject({
      reason: 'event_gone',
      deliveryId: erasedDelivery,
    });
    expect(await t.redis.exists(t.keys.deliveries.record(webhookId, erasedDelivery))).toBe(0);
    expect(await t.redis.hexists(t.keys.deliveries.logStatuses(webhookId), erasedDelivery)).toBe(0);
    await queuesDrained(t.queues);
  });

  it('queues first attempts as delayed batch jobs when the schedule’s first attempt waits, and sends none before it is due', async () => {
    t = await testApp({ retryScheduleMs: [600, 1_000] });
    const r = await receiver();
    const created = await t.webhooks.create('v-delay', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/in` });
    if (!created.ok) throw new Error('webhook not created');
    const acceptedAtMs = Date.now();
    await t.ingestor.ingest(
      Array.from({ length: 3 }, () => machineEvent('v-delay')),
      'http',
    );
    // A stream entry is read at once: the waiting first attempt is a delayed job instead.
    expect(await firstAttemptBatches(t)).toEqual([]);
    const partition = t.queues.partitions[partitionOf(created.webhook.id, t.queues.partitions.length)]!;
    const [job] = await partition.batches.getDelayed();
    expect((job?.data as { deliveries: DeliverJob[] }).deliveries).toHaveLength(3);

    worker = await startTestWorker(t);
    await waitFor(() => r.requests.length >= 3, 10_000, 'the three deliveries');
    expect(Math.min(...r.requests.map((q) => q.atMs)) - acceptedAtMs).toBeGreaterThanOrEqual(600);
    await queuesDrained(t.queues);
  });

  it('a re-run batch sends only what was not attempted, and re-queues a delivery waiting for its retry', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const r = await receiver();
    const created = await t.webhooks.create('v-rerun', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/in` });
    if (!created.ok) throw new Error('webhook not created');
    const [done, waiting, fresh] = [0, 1, 2].map(() => delivery(created.webhook.id, 'v-rerun')) as [
      DeliverJob,
      DeliverJob,
      DeliverJob,
    ];
    const nowMs = Date.now();
    await t.deliveryLog.recordAttempt({
      job: done,
      attempt: { attempt: 1, atMs: nowMs, outcome: 'delivered', statusCode: 200, durationMs: 3 },
      status: 'delivered',
    });
    await t.deliveryLog.recordAttempt({
      job: waiting,
      attempt: { attempt: 1, atMs: nowMs, outcome: 'http_5xx', statusCode: 500, durationMs: 3 },
      status: 'retrying',
      nextAttemptAtMs: nowMs + 60_000,
    });

    const { processBatch } = await idleWorker(t);
    const summary = await processBatch(batchJob([done, waiting, fresh], 2));
    expect(summary).toEqual({ deliveries: 3, attempted: 1, handedOff: 1, skipped: 1 });
    expect(r.requests.map((q) => q.headers['webhook-id'])).toEqual([fresh.eventId]);
    const single = await t.queues.partitions[
      partitionOf(created.webhook.id, t.queues.partitions.length)
    ]!.singles.getJob(waiting.deliveryId);
    expect(single?.data).toMatchObject({ deliveryId: waiting.deliveryId });
    expect(await single?.getState()).toBe('delayed');
    expect(single!.opts.delay).toBeGreaterThan(55_000);
    expect((await t.deliveryLog.progressOf([fresh]))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
  });

  it('hands off deliveries held up by a hanging receiver, so the batch finishes while healthy ones are delivered', async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200] });
    const hanging = await receiver();
    const healthy = await receiver();
    hanging.script('/h', 'hang');
    const slow = await t.webhooks.create('v-hang', { eventType: EVENT_TYPE, callbackUrl: `${hanging.base}/h` });
    const good = await t.webhooks.create('v-good', { eventType: EVENT_TYPE, callbackUrl: `${healthy.base}/ok` });
    if (!slow.ok || !good.ok) throw new Error('webhooks not created');
    const toHanging = Array.from({ length: 5 }, () => delivery(slow.webhook.id, 'v-hang'));
    const toHealthy = Array.from({ length: 20 }, () => delivery(good.webhook.id, 'v-good'));

    const { processBatch, slots } = await idleWorker(t, { slowAfterMs: 200, deliveryTimeoutMs: 1_500 });
    const startedMs = Date.now();
    const summary = await processBatch(batchJob([...toHanging, ...toHealthy], 1));
    const elapsedMs = Date.now() - startedMs;

    // Done after about one hold period, not after the 1.5 s timeout.
    expect(elapsedMs).toBeLessThan(1_000);
    expect(healthy.requests).toHaveLength(20);
    // First contact: one attempt reached the hanging receiver; the other four never left.
    expect(hanging.requests).toHaveLength(1);
    expect(summary).toMatchObject({ deliveries: 25, attempted: 21, handedOff: 5, skipped: 0 });
    // The attempt in flight left as a single job; the four deferred behind it were parked together:
    // one delayed batch job holding them, which the endpoint's wakeup brings back as one.
    const partition = t.queues.partitions[partitionOf(slow.webhook.id, t.queues.partitions.length)]!;
    const [contact, ...behind] = toHanging;
    expect(((await partition.singles.getJob(contact!.deliveryId))?.data as DeliverJob | undefined)?.deliveryId).toBe(
      contact!.deliveryId,
    );
    for (const d of behind) expect(await partition.singles.getJob(d.deliveryId)).toBeUndefined();
    const parks = (await partition.batches.getDelayed()).filter((job) => job.id?.startsWith('p-'));
    expect(parks).toHaveLength(1);
    expect((parks[0]!.data as { deliveries: DeliverJob[] }).deliveries.map((d) => d.deliveryId)).toEqual(
      behind.map((d) => d.deliveryId),
    );
    // The handed-off and deferred deliveries have records before their jobs, naming the park that
    // holds each: a re-run of this batch (had it failed after the hand-off) leaves them to those
    // jobs instead of sending them beside them, and skips what was delivered.
    const progress = await t.deliveryLog.progressOf(toHanging);
    expect(progress.map((p) => p?.status)).toEqual(toHanging.map(() => 'pending'));
    expect(progress.map((p) => p?.parkedIn)).toEqual([undefined, ...behind.map(() => parks[0]!.id)]);
    const rerun = await processBatch(batchJob([...toHanging, ...toHealthy], 2));
    expect(rerun).toMatchObject({ deliveries: 25, attempted: 0, handedOff: 5, skipped: 20 });
    expect(hanging.requests).toHaveLength(1);
    // Re-parking adds nothing: the park is there, with the same id.
    expect(
      (await partition.batches.getDelayed()).filter((job) => job.id?.startsWith('p-')).map((job) => job.id),
    ).toEqual([parks[0]!.id]);
    expect(healthy.requests).toHaveLength(20);
    // The handed-off attempt goes on and records its timeout; its single job then reads the record.
    await waitFor(
      async () =>
        (await t!.deliveryLog.progressOf(toHanging)).some((p) => p?.status === 'retrying' && p.attempts === 1),
      5_000,
      'timeout recorded',
    );
    await slots.idle();
  });

  it('a park sends what it holds once its endpoint answers; its re-run sends only what is still its own and re-parks the rest', async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200] });
    const r = await receiver();
    // The first contact hangs (and times out after 500 ms); every request after it is answered.
    r.script('/p', 'hang', { status: 200 });
    const hook = await t.webhooks.create('v-park', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/p` });
    if (!hook.ok) throw new Error('webhook not created');
    const held = Array.from({ length: 4 }, () => delivery(hook.webhook.id, 'v-park'));
    const { processBatch, slots } = await idleWorker(t, { slowAfterMs: 200, deliveryTimeoutMs: 500 });
    expect(await processBatch(batchJob(held, 1))).toMatchObject({ deliveries: 4, attempted: 1, handedOff: 4 });
    await slots.idle();
    const partition = t.queues.partitions[partitionOf(hook.webhook.id, t.queues.partitions.length)]!;
    // Delayed, or already promoted as the endpoint's next contact once the first timed out.
    const [park] = (await partition.batches.getJobs(['delayed', 'waiting'])).filter((job) => job.id?.startsWith('p-'));
    const parked = (park!.data as { deliveries: DeliverJob[] }).deliveries;
    expect(parked.map((d) => d.deliveryId)).toEqual(held.slice(1).map((d) => d.deliveryId));

    // The park runs (its wakeup would promote it): the endpoint answers the next contact, the rest follow.
    const parkJob = (id: string, deliveries: DeliverJob[], attemptsStarted: number) =>
      ({ ...batchJob(deliveries, attemptsStarted), id }) as unknown as Job;
    expect(await processBatch(parkJob(park!.id!, parked, 1))).toMatchObject({
      deliveries: 3,
      attempted: 3,
      handedOff: 0,
      skipped: 0,
    });
    const sent = (id: string) => r.requests.filter((q) => q.headers['webhook-id'] === id).length;
    expect(parked.map((d) => sent(d.eventId))).toEqual([1, 1, 1]);
    // Run again (a crash before it completed): everything it held is finished, nothing is sent.
    expect(await processBatch(parkJob(park!.id!, parked, 2))).toMatchObject({
      deliveries: 3,
      attempted: 0,
      skipped: 3,
    });
    expect(parked.map((d) => sent(d.eventId))).toEqual([1, 1, 1]);

    // A park's re-run whose members moved on meanwhile: one still its own (sent now), one parked
    // again elsewhere (re-parked there under that id, not sent beside it).
    const [own, elsewhere] = [delivery(hook.webhook.id, 'v-park'), delivery(hook.webhook.id, 'v-park')];
    const nowMs = Date.now();
    await t.deliveryLog.recordDeferred([
      { job: own, nextAttemptAtMs: nowMs, dueAtMs: nowMs, parkedIn: 'p-own' },
      { job: elsewhere, nextAttemptAtMs: nowMs + 60_000, dueAtMs: nowMs, parkedIn: 'p-elsewhere' },
    ]);
    expect(await processBatch(parkJob('p-own', [own, elsewhere], 2))).toMatchObject({
      deliveries: 2,
      attempted: 1,
      handedOff: 1,
      skipped: 0,
    });
    expect([sent(own.eventId), sent(elsewhere.eventId)]).toEqual([1, 0]);
    const reparked = await partition.batches.getJob('p-elsewhere');
    expect(await reparked?.getState()).toBe('delayed');
    expect((reparked!.data as { deliveries: DeliverJob[] }).deliveries.map((d) => d.deliveryId)).toEqual([
      elsewhere.deliveryId,
    ]);
  });

  it('a handed-off delivery whose slow attempt then succeeds leaves no delayed job behind: the queues drain at once', async () => {
    t = await testApp({ retryScheduleMs: [0, 200] });
    const r = await receiver();
    // Slower than the hold (200 ms), far quicker than the timeout (20 s): handed off, then delivered.
    r.script('/slow', { status: 200, delayMs: 600 });
    const created = await t.webhooks.create('v-slow', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/slow` });
    if (!created.ok) throw new Error('webhook not created');
    await t.ingestor.ingest([machineEvent('v-slow')], 'http');
    worker = await startTestWorker(t, { deliveryTimeoutMs: 20_000, breaker: { slowAfterMs: 200 } });
    await waitFor(
      () => worker!.outcomes.some((o) => o.kind === 'attempted' && o.outcome === 'delivered'),
      10_000,
      'delivered',
    );
    // Its single job, due at the attempt's start + timeout + 1 s, is woken once the attempt is
    // recorded, finds the delivery finished and completes: nothing waits 21 s in the queue.
    await queuesDrained(t.queues, 5_000);
    expect(worker.outcomes.filter((o) => o.kind === 'skipped')).toHaveLength(1);
    expect(r.requests).toHaveLength(1);
  });

  it('the single job of a handed-off delivery skips it once the record says delivered', async () => {
    t = await testApp({ retryScheduleMs: [0, 200] });
    const r = await receiver();
    const created = await t.webhooks.create('v-skip', { eventType: EVENT_TYPE, callbackUrl: `${r.base}/in` });
    if (!created.ok) throw new Error('webhook not created');
    const d = delivery(created.webhook.id, 'v-skip');
    await t.deliveryLog.recordAttempt({
      job: d,
      attempt: { attempt: 1, atMs: Date.now(), outcome: 'delivered', statusCode: 200, durationMs: 2 },
      status: 'delivered',
    });
    await t.queues.addSingles([{ job: d, delayMs: 0 }]);
    worker = await startTestWorker(t);
    await waitFor(
      () => worker!.outcomes.some((o) => o.kind === 'skipped' && o.job.deliveryId === d.deliveryId),
      10_000,
      'skipped',
    );
    expect(r.requests).toHaveLength(0);
  });
});
