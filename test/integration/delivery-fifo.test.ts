import { afterEach, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/delivery/jobs.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { receiverPool, type TestReceiver } from '../helpers/receiver.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

/** [a, 1, b, 2] → [[a, 1], [b, 2]] (a ZRANGE WITHSCORES reply). */
const toPairs = (flat: string[]) => flat.flatMap((value, i) => (i % 2 === 0 ? [[value, flat[i + 1]!] as const] : []));
const eventIdOf = (body: string) => (JSON.parse(body) as { event_id: string }).event_id;
/** The event ids a receiver got, in arrival order. */
const arrivals = (receiver: TestReceiver) => receiver.requests.map((r) => eventIdOf(r.body));
/** Each event id once, at its first arrival. */
const firstArrivals = (receiver: TestReceiver) => [...new Set(arrivals(receiver))];

/** A line entry for the store's own tests: delivery n of a webhook, accepted at 1,000 + n ms. */
const lineEntry = (n: number, webhookId: string) => ({
  job: {
    deliveryId: `d-${n}`,
    eventId: `e-${n}`,
    eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
    vendorId: 'v',
    webhookId,
    body: '{}',
    acceptedAtMs: 1_000 + n,
  },
});
describe('FIFO ordering per webhook', () => {
  let t: TestApp | undefined;
  const workers: TestWorker[] = [];
  const receivers = receiverPool();

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    await receivers.closeAll();
    await t?.close();
    t = undefined;
  });

  /** Ingests `n` events for `vendorId` one call each (so they have distinct accept times); answers their ids in accept order. */
  async function ingestInOrder(app: TestApp, vendorId: string, n: number, perCall = 1): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i += perCall) {
      const events = Array.from({ length: Math.min(perCall, n - i) }, () => machineEvent(vendorId));
      const results = await app.ingestor.ingest(events, 'http');
      expect(results.every((r) => r.status === 'accepted')).toBe(true);
      ids.push(...events.map((e) => e.event_id));
    }
    return ids;
  }

  /** PATCHes a webhook through the API, as its vendor. */
  const patchAs = (app: TestApp, webhook: { id: string; key: string }, body: object) =>
    app.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
      payload: body,
    });

  async function stats(app: TestApp, webhook: { id: string; key: string }) {
    const res = await app.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${webhook.id}/stats`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(res.statusCode).toBe(200);
    return res.json<{ ordering: string; fifo_line: { length: number; oldest_waiting_ms: number | null } | null }>();
  }

  it('the line store: idempotent appends in order, an exclusive lease, removal fenced by the lease and the head, no line left unmarked, each head’s wait indexed', async () => {
    t = await testApp();
    const lines = t.fifoLines;
    const job = (n: number, webhookId = 'w-lines') => lineEntry(n, webhookId);
    const NOW = 5_000;
    const partition = partitionOf('w-lines', t.queues.partitions.length);
    const due = async (atMs: number) => (await lines.due(partition, atMs, 10)).lineIds;
    const { fifo } = t.keys;
    /** Since when the line's head has been its head, by the heads index (null: no entry). */
    const headSince = async () => {
      const score = await t!.redis.zscore(fifo.heads(partition), 'w-lines');
      return score === null ? null : Number(score);
    };

    expect(await lines.oldestHeadAgeMs(NOW)).toBe(0);
    await lines.append([job(1), job(2)], NOW);
    // Appended again (an ingest repeated after a crash): same places, nothing added; the head still waits from the first.
    await lines.append([job(2), job(1), job(3)], NOW + 500);
    expect(await lines.summary('w-lines')).toEqual({ length: 3, headAcceptedAtMs: 1_001 });
    expect(await due(NOW)).toEqual(['w-lines']);
    expect(await headSince()).toBe(NOW);
    expect(await lines.oldestHeadAgeMs(NOW + 1_500)).toBe(1_500);

    // One holder at a time; the line is hidden from the others until the lease would end.
    expect(await lines.claim('w-lines', 'token-a', NOW, 10_000)).toBe(true);
    expect(await lines.claim('w-lines', 'token-b', NOW, 10_000)).toBe(false);
    expect(await due(NOW + 9_999)).toEqual([]);
    expect(await due(NOW + 10_000)).toEqual(['w-lines']);
    expect(await lines.renew('w-lines', 'token-b', NOW, 10_000)).toBe(false);

    // Reading the head (a turn's start) leaves its wait as it was.
    expect((await lines.head('w-lines', NOW + 2_000))?.job.deliveryId).toBe('d-1');
    expect(await headSince()).toBe(NOW);
    // Only the holder removes, and only the head.
    expect((await lines.advance('w-lines', 'token-b', 'd-1', NOW + 3_000)).removed).toBe(false);
    expect((await lines.advance('w-lines', 'token-a', 'd-2', NOW + 3_000)).removed).toBe(false);
    expect(await headSince()).toBe(NOW);
    // The next head comes with the removal, and waits from then.
    const advanced = await lines.advance('w-lines', 'token-a', 'd-1', NOW + 3_000);
    expect(advanced.removed && advanced.next?.job.deliveryId).toBe('d-2');
    expect((await lines.head('w-lines', NOW + 3_500))?.job.deliveryId).toBe('d-2');
    expect(await headSince()).toBe(NOW + 3_000);
    expect(await lines.oldestHeadAgeMs(NOW + 4_000)).toBe(1_000);

    // A release by a worker that lost the lease changes nothing; the holder's marks the line due at
    // its head's time (a retry), and the head goes on waiting.
    await lines.release('w-lines', 'token-b', NOW + 60_000);
    expect(await lines.claim('w-lines', 'token-c', NOW, 10_000)).toBe(false);
    await lines.release('w-lines', 'token-a', NOW + 60_000);
    expect(await due(NOW + 59_999)).toEqual([]);
    expect(await due(NOW + 60_000)).toEqual(['w-lines']);
    expect(await headSince()).toBe(NOW + 3_000);

    // Emptied and released: the line leaves the ready set and the heads index, unless a delivery came meanwhile.
    expect(await lines.claim('w-lines', 'token-d', NOW, 10_000)).toBe(true);
    expect((await lines.advance('w-lines', 'token-d', 'd-2', NOW + 5_000)).removed).toBe(true);
    expect(await lines.advance('w-lines', 'token-d', 'd-3', NOW + 6_000)).toEqual({ removed: true, next: undefined });
    expect(await headSince()).toBe(null);
    expect(await lines.oldestHeadAgeMs(NOW + 7_000)).toBe(0);
    await lines.append([job(4)], NOW + 7_000);
    expect(await headSince()).toBe(NOW + 7_000);
    await lines.release('w-lines', 'token-d', undefined);
    expect(await due(NOW)).toEqual(['w-lines']);
    expect(await headSince()).toBe(NOW + 7_000);
    expect(await lines.claim('w-lines', 'token-e', NOW, 10_000)).toBe(true);
    expect((await lines.advance('w-lines', 'token-e', 'd-4', NOW + 8_000)).removed).toBe(true);
    await lines.release('w-lines', 'token-e', undefined);
    expect(await due(Number.MAX_SAFE_INTEGER)).toEqual([]);
    expect(await lines.linesWaiting()).toBe(0);
    expect(await lines.summary('w-lines')).toEqual({ length: 0, headAcceptedAtMs: undefined });
    // Emptied, the line left no key behind (its sequence went with its last delivery), and no entry in the heads index.
    const lineKeys = [fifo.seq, fifo.line, fifo.jobs, fifo.lease].map((key) => key(partition, 'w-lines'));
    expect(await t.redis.exists(...lineKeys)).toBe(0);
    expect(await t.redis.exists(fifo.heads(partition))).toBe(0);
    expect(await lines.oldestHeadAgeMs(Number.MAX_SAFE_INTEGER)).toBe(0);
    // A later append starts the line again, in order, its head waiting from then.
    await lines.append([job(5), job(6)], NOW + 9_000);
    expect((await lines.head('w-lines', NOW + 9_500))?.job.deliveryId).toBe('d-5');
    expect(await headSince()).toBe(NOW + 9_000);
  });

  it('the heads index: a paused head is left out until its next turn, an erasure and a drop leave no entry, an entry its line outlived is cleared when read', async () => {
    t = await testApp({ queuePartitions: 1 });
    const lines = t.fifoLines;
    const { fifo } = t.keys;
    const job = (n: number, webhookId = 'w-heads') => lineEntry(n, webhookId);
    const NOW = 5_000;
    const index = async () => Object.fromEntries(toPairs(await t!.redis.zrange(fifo.heads(0), 0, -1, 'WITHSCORES')));

    // Two lines: the oldest head is the gauge's.
    await lines.append([job(1), job(2), job(3)], NOW);
    await lines.append([job(9, 'w-other')], NOW + 1_000);
    expect(await index()).toEqual({ 'w-heads': String(NOW), 'w-other': String(NOW + 1_000) });
    expect(await lines.oldestHeadAgeMs(NOW + 2_000)).toBe(2_000);

    // A turn that finds its head held for a pause gives the line back unindexed: the head waits for
    // its webhook's owner, not for the engine; an append behind it does not count it again.
    expect(await lines.claim('w-heads', 'token-a', NOW, 10_000)).toBe(true);
    expect((await lines.head('w-heads', NOW + 2_000))?.job.deliveryId).toBe('d-1');
    await lines.release('w-heads', 'token-a', NOW + 60_000, true);
    await lines.append([job(4)], NOW + 3_000);
    expect(await index()).toEqual({ 'w-other': String(NOW + 1_000) });
    expect(await lines.oldestHeadAgeMs(NOW + 4_000)).toBe(3_000);
    // Enabled: the next turn counts the head again, from then.
    expect(await lines.claim('w-heads', 'token-b', NOW + 5_000, 10_000)).toBe(true);
    expect((await lines.head('w-heads', NOW + 5_000))?.job.deliveryId).toBe('d-1');
    expect(await index()).toEqual({ 'w-heads': String(NOW + 5_000), 'w-other': String(NOW + 1_000) });
    await lines.release('w-heads', 'token-b', NOW + 60_000);

    // An erasure of the head: the next head waits from then, and is due then, not at the removed head's retry.
    expect(await lines.remove('w-heads', ['d-1', 'd-404'], NOW + 6_000)).toBe(1);
    expect(await index()).toEqual({ 'w-heads': String(NOW + 6_000), 'w-other': String(NOW + 1_000) });
    expect((await lines.due(0, NOW + 5_999, 10)).lineIds).not.toContain('w-heads');
    expect((await lines.due(0, NOW + 6_000, 10)).lineIds).toContain('w-heads');
    // Of a delivery behind the head: the head's wait stays.
    expect(await lines.remove('w-heads', ['d-3'], NOW + 7_000)).toBe(1);
    expect(await index()).toEqual({ 'w-heads': String(NOW + 6_000), 'w-other': String(NOW + 1_000) });
    // Of the rest: the line goes whole, keys, ready entry and heads entry.
    expect(await lines.remove('w-heads', ['d-2', 'd-4'], NOW + 8_000)).toBe(2);
    expect(await index()).toEqual({ 'w-other': String(NOW + 1_000) });
    expect((await lines.due(0, Number.MAX_SAFE_INTEGER, 10)).lineIds).toEqual(['w-other']);
    const keysOf = (lineId: string) => [fifo.seq, fifo.line, fifo.jobs].map((key) => key(0, lineId));
    expect(await t.redis.exists(...keysOf('w-heads'))).toBe(0);

    // A dropped webhook's lines (its erasure): nothing of them is left, ordering-key lines included.
    await lines.append([{ ...job(10, 'w-other'), bucket: 7 }], NOW + 9_000);
    expect(await lines.claim('w-other', 'token-c', NOW + 9_000, 10_000)).toBe(true);
    expect(await lines.drop('w-other')).toBe(7);
    expect(await t.redis.exists(fifo.heads(0), fifo.ready(0))).toBe(0);
    expect(await lines.oldestHeadAgeMs(NOW + 10_000)).toBe(0);

    // An entry whose line is gone (a version without the index emptied it) is cleared when read, not
    // shown as a head waiting for ever; one whose line exists is kept.
    await lines.append([job(11, 'w-live')], NOW + 10_000);
    await t.redis.zadd(fifo.heads(0), NOW, 'w-gone');
    expect(await lines.oldestHeadAgeMs(NOW + 12_000)).toBe(2_000);
    expect(await index()).toEqual({ 'w-live': String(NOW + 10_000) });
  });

  it('a failing head holds back the rest until it is delivered, then they go in accept order; the stats show the line', async () => {
    t = await testApp({ retryScheduleMs: [0, 400, 400, 400] });
    const receiver = await receivers.start();
    // The first delivery fails twice, then every answer is 200.
    receiver.script('/in', { status: 500 }, { status: 500 }, { status: 200 });
    const webhook = await t.register('fifo', `${receiver.base}/in`, { ordering: 'fifo' });
    const ids = await ingestInOrder(t, 'fifo', 10, 3);
    // The line before any worker runs: all ten wait, the oldest since its ingest.
    const before = await stats(t, webhook);
    expect(before.ordering).toBe('fifo');
    expect(before.fifo_line?.length).toBe(10);
    expect(before.fifo_line?.oldest_waiting_ms).toBeGreaterThanOrEqual(0);
    workers.push(await startTestWorker(t), await startTestWorker(t));

    await waitFor(() => receiver.requests.length >= 12, 15_000, 'ten deliveries and two retries');
    const got = arrivals(receiver);
    console.log(`fifo blocked head: arrivals ${got.map((id) => ids.indexOf(id)).join(',')}`);
    // Nothing behind the head went before its third attempt succeeded.
    expect(got).toEqual([ids[0], ids[0], ...ids]);
    const deliveries = await t.deliveryLog.recent(webhook.id, 100);
    expect(deliveries.every((d) => d.status === 'delivered')).toBe(true);
    await waitFor(async () => (await stats(t!, webhook)).fifo_line?.length === 0, 5_000, 'an empty line');
    expect((await stats(t, webhook)).fifo_line).toEqual({ length: 0, oldest_waiting_ms: null });
  });

  it('the oldest head’s age: grows while a head keeps failing, starts again when an erasure takes the head, and is 0 with no index entry once the line empties', async () => {
    // Fifty retries 200 ms apart: a head keeps failing for about ten seconds before it would be dead-lettered.
    t = await testApp({ retryScheduleMs: [0, ...Array.from({ length: 50 }, () => 200)] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 });
    await t.register('aging', `${receiver.base}/in`, { ordering: 'fifo' });
    // The circuit stays closed: the head is attempted again and again rather than held by it.
    workers.push(await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 } }));
    const startedMs = Date.now();
    const events = [machineEvent('aging'), machineEvent('aging'), machineEvent('aging')];
    expect((await t.ingestor.ingest(events, 'http')).every((r) => r.status === 'accepted')).toBe(true);
    const [first, second] = events.map((e) => e.event_id);

    // The gauge as a scrape reads it, from the API's /metrics.
    const app = t;
    const age = async () => {
      const text = (await app.app.inject({ method: 'GET', url: '/metrics' })).body;
      const value = /^hookline_fifo_oldest_head_age_seconds\{[^}]*\} (\S+)$/m.exec(text)?.[1];
      expect(value, 'the gauge is exported').toBeDefined();
      return Number(value);
    };
    const heads = async () =>
      (await Promise.all(app.queues.partitions.map((_, n) => app.redis.zrange(app.keys.fifo.heads(n), 0, -1)))).flat();

    await waitFor(() => receiver.requests.length >= 3, 10_000, 'the head failing three times');
    expect(new Set(arrivals(receiver))).toEqual(new Set([first]));
    const early = await age();
    // The head has waited since its ingest, not since its last attempt.
    expect(early).toBeGreaterThanOrEqual(0.3);
    expect(early).toBeLessThanOrEqual((Date.now() - startedMs) / 1_000);
    const later = await waitFor(
      async () => {
        const now = await age();
        return now >= early + 0.5 && now;
      },
      10_000,
      'the age growing while the head keeps failing',
    );
    console.log(`fifo head age: ${early.toFixed(3)} s, then ${later.toFixed(3)} s, the head still failing`);

    // The failing head erased: the next head waits from then, not from its ingest, and goes at once (it fails too).
    const sentBefore = receiver.requests.length;
    const erasedAtMs = Date.now();
    await t.eraser.eraseEvent(first!);
    const afterErasure = await age();
    expect(afterErasure).toBeLessThan(later);
    expect(afterErasure).toBeLessThanOrEqual((Date.now() - erasedAtMs) / 1_000);
    await waitFor(() => arrivals(receiver).slice(sentBefore).includes(second!), 5_000, 'the next head sent');

    // Delivered: the line empties, the gauge is 0 and the index holds nothing.
    receiver.script('/in', { status: 200 });
    await waitFor(() => new Set(arrivals(receiver)).size >= 3, 10_000, 'the rest delivered');
    await waitFor(async () => (await age()) === 0, 5_000, 'the gauge back to 0');
    expect(await heads()).toEqual([]);
    expect(await t.fifoLines.linesWaiting()).toBe(0);
  });

  it('a head that dead-letters lets the next go; its replay joins the end of the line; a test event does not wait in it', async () => {
    t = await testApp({ retryScheduleMs: [0, 300] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 }, { status: 500 }, { status: 200 });
    const webhook = await t.register('fifo', `${receiver.base}/in`, { ordering: 'fifo' });
    workers.push(await startTestWorker(t));
    const ids = await ingestInOrder(t, 'fifo', 5);
    await waitFor(() => receiver.requests.length >= 6, 10_000, 'two failures and four deliveries');
    expect(arrivals(receiver)).toEqual([ids[0], ids[0], ids[1], ids[2], ids[3], ids[4]]);
    const [dead] = await t.deliveryLog.deadLetters(webhook.id, 10);
    expect(dead?.eventId).toBe(ids[0]);

    // A held line: the next head fails once (its retry comes 300 ms later), so what is sent meanwhile
    // queues behind it, except the test event.
    receiver.script('/in', { status: 500 }, { status: 200 });
    const next = (await ingestInOrder(t, 'fifo', 1))[0]!;
    await waitFor(() => receiver.requests.length >= 7, 5_000, 'the next head’s first attempt');
    const replay = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/dead-letters/${dead!.deliveryId}/replay`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(replay.statusCode).toBe(202);
    const test = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/test`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(test.statusCode).toBe(202);
    const testEventId = test.json<{ event_id: string }>().event_id;
    await waitFor(() => arrivals(receiver).filter((id) => id === ids[0]).length >= 3, 10_000, 'the replay');
    const later = arrivals(receiver).slice(6);
    console.log(
      `fifo replay: ${later.map((id) => (id === next ? 'next' : id === ids[0] ? 'replay' : id === testEventId ? 'test' : id)).join(',')}`,
    );
    // The test event went while the head waited for its retry; the replay only after the head was delivered.
    expect(later).toEqual([next, testEventId, next, ids[0]]);
  });

  it('a FIFO webhook and an unordered one side by side: the FIFO one sends one at a time, the other keeps its pace', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000] });
    const fifoReceiver = await receivers.start();
    const freeReceiver = await receivers.start();
    fifoReceiver.script('/in', { status: 200, delayMs: 30 });
    freeReceiver.script('/in', { status: 200, delayMs: 30 });
    await t.register('fifo', `${fifoReceiver.base}/in`, { ordering: 'fifo' });
    await t.register('free', `${freeReceiver.base}/in`);
    workers.push(
      await startTestWorker(t, { workerConcurrency: 20 }),
      await startTestWorker(t, { workerConcurrency: 20 }),
    );
    const EVENTS = 60;
    const events = Array.from({ length: EVENTS }, () => [machineEvent('fifo'), machineEvent('free')]).flat();
    const startMs = Date.now();
    // Three ingest calls: accept order is the order within a call, then call after call.
    for (let i = 0; i < events.length; i += 40) await t.ingestor.ingest(events.slice(i, i + 40), 'http');
    const fifoIds = events.filter((e) => e.vendor_id === 'fifo').map((e) => e.event_id);
    await waitFor(() => freeReceiver.requests.length >= EVENTS, 10_000, 'the unordered webhook’s deliveries');
    const freeDoneMs = Date.now() - startMs;
    const fifoAtFreeDone = fifoReceiver.requests.length;
    await waitFor(() => fifoReceiver.requests.length >= EVENTS, 20_000, 'the FIFO webhook’s deliveries');
    const fifoDoneMs = Date.now() - startMs;
    console.log(
      `fifo beside unordered, ${EVENTS} each at 30 ms: unordered done in ${freeDoneMs} ms (fifo had ${fifoAtFreeDone}), fifo in ${fifoDoneMs} ms`,
    );
    expect(arrivals(fifoReceiver)).toEqual(fifoIds);
    // One in flight: each request arrives after the previous one's 30 ms answer.
    const gaps = fifoReceiver.requests.slice(1).map((r, i) => r.atMs - fifoReceiver.requests[i]!.atMs);
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(29);
    expect(fifoAtFreeDone).toBeLessThan(EVENTS / 2);
  });

  it('PATCH ordering none after a backlog: the line still goes out in order, later events concurrently, none lost', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 200, delayMs: 20 });
    const webhook = await t.register('switch', `${receiver.base}/in`, { ordering: 'fifo' });
    const lined = await ingestInOrder(t, 'switch', 20, 20);
    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
      payload: { ordering: 'none' },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ ordering: 'none' });
    // Switched with 20 in the line: the stats still show it.
    expect((await stats(t, webhook)).fifo_line?.length).toBe(20);
    const unordered = await ingestInOrder(t, 'switch', 20, 20);
    workers.push(await startTestWorker(t));
    await waitFor(() => new Set(arrivals(receiver)).size >= 40, 15_000, 'every delivery');
    const got = firstArrivals(receiver);
    expect(got.filter((id) => lined.includes(id))).toEqual(lined);
    expect(new Set(got)).toEqual(new Set([...lined, ...unordered]));
    await waitFor(async () => (await stats(t!, webhook)).fifo_line === null, 5_000, 'no line shown once it is empty');
  });

  it('a paused FIFO webhook’s line holds its head and everything behind it, unsent, not counted as a head waiting; enabled, it goes on from the head, in order', async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 60_000] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 });
    const webhook = await t.register('paused', `${receiver.base}/in`, { ordering: 'fifo' });
    const worker = await startTestWorker(t);
    workers.push(worker);
    const ids = await ingestInOrder(t, 'paused', 5, 5);
    await waitFor(() => receiver.requests.length >= 1, 5_000, 'the head’s first attempt');
    const patch = (body: object) => patchAs(t!, webhook, body);
    expect((await patch({ enabled: false })).statusCode).toBe(200);
    // The head's retry comes due on a paused webhook: it waits unsent, and the line behind it.
    await waitFor(
      () =>
        worker.outcomes.some((o) => o.kind === 'deferred' && o.reason === 'webhook_paused' && o.job.eventId === ids[0]),
      10_000,
      'the head held',
    );
    expect(await quiescent(() => receiver.requests.length, 1_000, 10_000, 'nothing sent while paused')).toBe(1);
    expect(await t.deliveryLog.deadLetters(webhook.id, 10)).toEqual([]);
    expect((await stats(t, webhook)).fifo_line?.length).toBe(5);
    // Held for the pause, the head is not one waiting on the engine: the gauge leaves it out.
    const heads = t.keys.fifo.heads(partitionOf(webhook.id, t.queues.partitions.length));
    expect(await t.redis.zscore(heads, webhook.id)).toBe(null);
    expect(await t.fifoLines.oldestHeadAgeMs(Date.now())).toBe(0);

    receiver.script('/in', { status: 200 });
    expect((await patch({ enabled: true })).statusCode).toBe(200);
    await waitFor(() => receiver.requests.length >= 6, 10_000, 'the line after enable');
    expect(arrivals(receiver)).toEqual([ids[0], ...ids]);
    // The head goes on with its second attempt, the rest with their first.
    expect(receiver.requests.map((r) => r.headers['x-webhook-attempt'])).toEqual(['1', '2', '1', '1', '1', '1']);
    // Emptied: no entry is left in the heads index.
    await waitFor(async () => (await t!.fifoLines.linesWaiting()) === 0, 5_000, 'an empty line');
    expect(await t.redis.exists(heads)).toBe(0);
  });

  it('a FIFO line paused past its retry window is dead-lettered head by head as paused_expired, unsent; re-enabled, a bulk replay sends it through the line again', async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 300] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 });
    const webhook = await t.register('expired', `${receiver.base}/in`, { ordering: 'fifo' });
    workers.push(await startTestWorker(t));
    const ids = await ingestInOrder(t, 'expired', 5, 5);
    await waitFor(() => receiver.requests.length >= 1, 5_000, 'the head’s first attempt');
    const patch = (body: object) => patchAs(t!, webhook, body);
    expect((await patch({ enabled: false })).statusCode).toBe(200);
    // Held to the end of their window (600 ms after acceptance), then dead-lettered one after the other, unsent.
    await waitFor(
      async () => (await t!.deliveryLog.deadLetters(webhook.id, 10)).length === 5,
      10_000,
      'five dead letters',
    );
    const letters = await t.deliveryLog.deadLetters(webhook.id, 10);
    expect(new Set(letters.map((d) => d.lastOutcome))).toEqual(new Set(['paused_expired']));
    expect(arrivals(receiver)).toEqual([ids[0]]);
    expect((await stats(t, webhook)).fifo_line).toEqual({ length: 0, oldest_waiting_ms: null });

    receiver.script('/in', { status: 200 });
    expect((await patch({ enabled: true })).statusCode).toBe(200);
    const replay = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/dead-letters/replay`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(replay.statusCode).toBe(202);
    await waitFor(() => receiver.requests.length >= 6, 10_000, 'five replays');
    // Replays follow dead-letter order, which is accept order here up to letters dead in the same millisecond.
    expect(new Set(arrivals(receiver).slice(1))).toEqual(new Set(ids));
  });

  it('a deleted FIFO webhook’s line is dropped, not sent', async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 300] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 });
    const webhook = await t.register('deleted', `${receiver.base}/in`, { ordering: 'fifo' });
    workers.push(await startTestWorker(t));
    await ingestInOrder(t, 'deleted', 5, 5);
    await waitFor(() => receiver.requests.length >= 1, 5_000, 'the head’s first attempt');
    const deleted = await t.app.inject({
      method: 'DELETE',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(deleted.statusCode).toBe(204);
    const dropped = () =>
      workers[0]!.outcomes.filter((o) => o.kind === 'dropped' && o.job.webhookId === webhook.id).length;
    await waitFor(() => dropped() === 5, 10_000, 'five dropped');
    expect(receiver.requests).toHaveLength(1);
    await waitFor(async () => (await t!.fifoLines.summary(webhook.id)).length === 0, 5_000, 'an empty line');
    expect(await t.fifoLines.linesWaiting()).toBe(0);
    expect(await t.fifoLines.oldestHeadAgeMs(Date.now())).toBe(0);
  });

  it.each([5, 20])(
    'measures FIFO throughput against a receiver latency of %i ms (bounded by one in flight)',
    async (LATENCY_MS) => {
      t = await testApp({ retryScheduleMs: [0, 1_000] });
      const receiver = await receivers.start();
      receiver.script('/in', { status: 200, delayMs: LATENCY_MS });
      await t.register('fifo', `${receiver.base}/in`, { ordering: 'fifo' });
      // The production webhook cache (2 s), so a head costs what it costs in a worker process.
      workers.push(
        await startTestWorker(t, { webhookCacheTtlMs: 2_000 }),
        await startTestWorker(t, { webhookCacheTtlMs: 2_000 }),
      );
      const EVENTS = 200;
      const ids = await ingestInOrder(t, 'fifo', EVENTS, 100);
      await waitFor(() => receiver.requests.length >= EVENTS, 30_000, 'every delivery');
      const times = receiver.requests.map((r) => r.atMs);
      const spanS = (Math.max(...times) - Math.min(...times)) / 1_000;
      const perSecond = (EVENTS - 1) / spanS;
      console.log(
        `fifo throughput: ${EVENTS} deliveries, receiver latency ${LATENCY_MS} ms, 2 workers: ${perSecond.toFixed(1)}/s ` +
          `(bound 1/latency = ${(1_000 / LATENCY_MS).toFixed(0)}/s; ${((1_000 * spanS) / (EVENTS - 1)).toFixed(1)} ms per delivery)`,
      );
      expect(arrivals(receiver)).toEqual(ids);
      expect(perSecond).toBeLessThanOrEqual(1_000 / LATENCY_MS);
    },
  );

  it('ordering on the API: validated on POST and PATCH naming the field, returned on GET and list; auth and not-found', async () => {
    t = await testApp();
    const key = await t.keyFor(['vendor'], 'v-api');
    const post = (body: object, headers: Record<string, string> = { 'x-api-key': key }) =>
      t!.app.inject({ method: 'POST', url: '/vendors/v1/webhooks', headers, payload: body });
    const patch = (id: string, body: object, headers: Record<string, string> = { 'x-api-key': key }) =>
      t!.app.inject({ method: 'PATCH', url: `/vendors/v1/webhooks/${id}`, headers, payload: body });
    const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://vendor.example.com/in' };
    const created = await post({ ...base, ordering: 'fifo' });
    expect(created.statusCode).toBe(201);
    const id = created.json<{ webhook_id: string }>().webhook_id;
    const plain = await post({ ...base, event_type: 'EVENT_TYPE_MACHINE_UPDATED' });
    expect(plain.statusCode).toBe(201);
    const listed = (
      await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } })
    ).json<{
      webhooks: { webhook_id: string; ordering: string }[];
    }>().webhooks;
    expect(Object.fromEntries(listed.map((w) => [w.webhook_id, w.ordering]))).toEqual({
      [id]: 'fifo',
      [plain.json<{ webhook_id: string }>().webhook_id]: 'none',
    });

    for (const bad of ['FIFO', 'lifo', '', 1, null, true]) {
      const onPost = await post({ ...base, event_type: 'EVENT_TYPE_MACHINE_REMOVED', ordering: bad });
      expect({ bad, status: onPost.statusCode, body: onPost.json<{ error: string }>() }).toMatchObject({
        bad,
        status: 400,
        body: { error: expect.stringContaining('ordering must be "fifo" or "none"') as string },
      });
      const onPatch = await patch(id, { ordering: bad });
      expect({ bad, status: onPatch.statusCode, error: onPatch.json<{ error: string }>().error }).toMatchObject({
        bad,
        status: 400,
        error: expect.stringContaining('ordering') as string,
      });
    }
    // Nothing refused was stored.
    const got = await t.app.inject({ method: 'GET', url: `/vendors/v1/webhooks`, headers: { 'x-api-key': key } });
    expect(got.json<{ webhooks: unknown[] }>().webhooks).toHaveLength(2);

    const toNone = await patch(id, { ordering: 'none' });
    expect(toNone.statusCode).toBe(200);
    expect(toNone.json()).toMatchObject({ ordering: 'none' });
    expect(await t.webhooks.matchMany([{ vendorId: 'v-api', eventType: 'EVENT_TYPE_MACHINE_CREATED' }])).toEqual([
      { webhookId: id, fifo: false },
    ]);
    const back = await patch(id, { ordering: 'fifo' });
    expect(back.json()).toMatchObject({ ordering: 'fifo' });
    expect(await t.webhooks.matchMany([{ vendorId: 'v-api', eventType: 'EVENT_TYPE_MACHINE_CREATED' }])).toEqual([
      { webhookId: id, fifo: true },
    ]);

    // Auth: no key, and a key without the vendor role.
    expect((await post({ ...base, ordering: 'fifo' }, {})).statusCode).toBe(401);
    expect((await patch(id, { ordering: 'none' }, {})).statusCode).toBe(401);
    const reader = await t.keyFor(['machines:read']);
    expect((await patch(id, { ordering: 'none' }, { 'x-api-key': reader })).statusCode).toBe(403);
    // Not found: an unknown id, and another vendor's webhook.
    expect((await patch('6f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f', { ordering: 'fifo' })).statusCode).toBe(404);
    const other = await t.keyFor(['vendor'], 'v-other');
    expect((await patch(id, { ordering: 'none' }, { 'x-api-key': other })).statusCode).toBe(404);
    const otherStats = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${id}/stats`,
      headers: { 'x-api-key': other },
    });
    expect(otherStats.statusCode).toBe(404);
    // A deleted webhook leaves the FIFO set: its events match nothing.
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': key } }))
        .statusCode,
    ).toBe(204);
    expect(await t.redis.sismember(t.keys.webhooks.fifo, id)).toBe(0);
  });
});
