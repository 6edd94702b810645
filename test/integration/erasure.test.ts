import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/delivery/jobs.js';
import { linesOf } from '../../src/store/fifo-lines.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { capturedLogs } from '../helpers/logs.js';
import { readModelsProjected } from '../helpers/read-models.js';
import { storedText } from '../helpers/redis-dump.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const logs = capturedLogs();
const GROUP = 'hookline-ingest';

/** An event whose data carries `marker` in a field of its own (delivered as sent; no read model keeps it). */
const markedEvent = (vendorId: string, marker: string) => {
  const event = machineEvent(vendorId);
  return { ...event, data: { ...event.data, note: marker } };
};
/** A copy of `event` that ingest rejects (its timestamp is no time): over the stream, it goes to the dead stream whole. */
const rejected = (event: object) => ({ ...event, timestamp: 'not a time' });

describe('erasure (real Redis, a real receiver, a worker)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let admin: string;
  let producer: string;

  beforeAll(async () => {
    // Two attempts: a failing receiver leaves dead letters (bodies kept) after a retry.
    t = await testApp({ retryScheduleMs: [0, 20], logger: logs.logger() });
    receiver = new TestReceiver();
    await receiver.start();
    // It consumes the ingest stream too: events reach it over HTTP and over the stream.
    worker = await startTestWorker(t, { ingestStream: true, logger: logs.logger() });
    admin = await t.keyFor(['admin']);
    producer = await t.keyFor(['events:write']);
    // DUMP's bytes uncompressed, so a scan finds every byte Redis keeps (LZF would hide parts of a
    // marker behind back-references). Only the format of DUMP and snapshots changes.
    await t.redis.config('SET', 'rdbcompression', 'no');
  });
  afterAll(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  const api = (method: 'GET' | 'DELETE' | 'POST', url: string, key = admin, payload?: object) =>
    t.app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload }) });

  const stream = () => t.keys.events.streamOf(0);
  const deadStream = () => t.keys.events.deadOf(0);

  /** Ingest over HTTP, as a producer: POST /internal/v1/events. */
  async function postEvents(events: object[]): Promise<void> {
    const res = await t.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': producer },
      payload: { events },
    });
    expect(res.statusCode).toBe(202);
  }

  /** Ingest over the Redis stream, as a producer: XADD to the ingest stream. */
  async function xaddEvents(events: object[]): Promise<void> {
    for (const event of events) await t.redis.xadd(stream(), '*', 'event', JSON.stringify(event));
  }

  /** Waits until the worker's consumer has ingested (or set aside) every entry but `pending`, and the dead stream holds `dead`. */
  async function streamConsumed(pending: number, dead: number): Promise<void> {
    await waitFor(
      async () => {
        const [count] = (await t.redis.xpending(stream(), GROUP)) as [number];
        const info = (await t.redis.xinfo('STREAM', stream())) as unknown[];
        const groups = (await t.redis.xinfo('GROUPS', stream())) as unknown[][];
        const lastDelivered = groups.find((g) => g[1] === GROUP)?.[7];
        const lastAdded = info[info.indexOf('last-generated-id') + 1];
        return count === pending && lastDelivered === lastAdded && (await t.redis.xlen(deadStream())) === dead;
      },
      15_000,
      `the ingest stream consumed (${pending} pending, ${dead} set aside)`,
    );
  }

  /**
   * Everything stored in the whole Redis (not only under the test's prefix): values as commands read
   * them, and each key's DUMP (the bytes Redis keeps, deleted stream entries included).
   */
  async function everything(): Promise<string> {
    const pattern = '*';
    const dumps: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await t.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
      cursor = next;
      for (const key of keys) dumps.push(key, ((await t.redis.dumpBuffer(key)) ?? Buffer.alloc(0)).toString('latin1'));
    } while (cursor !== '0');
    return `${await storedText(t.redis, pattern)}\n${dumps.join('\n')}`;
  }

  async function finished(taskId: string): Promise<{ status: string; fail_reason: string | null }> {
    let task: { status: string; fail_reason: string | null } | undefined;
    await waitFor(
      async () => {
        task = (await api('GET', `/rental/v1/tasks/${taskId}`)).json();
        return task!.status === 'success' || task!.status === 'failed';
      },
      30_000,
      `task ${taskId} to end`,
    );
    return task!;
  }

  it('erases one event everywhere, over HTTP and the stream: feed, records, dead letters, replays and stream entries, proven by a scan of every key', async () => {
    const vendor = 'vendor-erase-event';
    const marker = `MARK-${randomUUID()}`;
    const kept = `KEEP-${randomUUID()}`;
    const webhook = await t.register(vendor, `${receiver.base}/failing`);
    receiver.script('/failing', { status: 500 });
    const erased = markedEvent(vendor, marker);
    const other = markedEvent(vendor, kept);
    // The event over the stream, then again over HTTP (a duplicate: its entry stays in the stream
    // all the same); the other one over HTTP. A rejected copy of each lands in the dead stream.
    await xaddEvents([erased]);
    await postEvents([erased, other]);
    await xaddEvents([rejected(erased), rejected(other)]);
    await waitFor(async () => (await t.deliveryLog.deadLetterCount(webhook.id)) === 2, 15_000, 'two dead letters');
    // A copy a consumer took and never acknowledged (it crashed): pending, its payload in the stream.
    // Appended and read in one transaction, so the worker's own consumer cannot take it first.
    await t.redis
      .multi()
      .xadd(stream(), '*', 'event', JSON.stringify(erased))
      .xreadgroup('GROUP', GROUP, 'crashed-consumer', 'COUNT', 1, 'STREAMS', stream(), '>')
      .exec();
    await streamConsumed(1, 2);
    // A replay of the dead letter: its record (and the one it replays) hold the event too.
    const [letter] = (await t.deliveryLog.deadLetters(webhook.id, 10)).filter((d) => d.eventId === erased.event_id);
    expect(
      (await api('POST', `/vendors/v1/webhooks/${webhook.id}/dead-letters/${letter!.deliveryId}/replay`, webhook.key))
        .statusCode,
    ).toBe(202);
    await waitFor(async () => (await t.deliveryLog.deadLetterCount(webhook.id)) === 2, 15_000, 'the replay dead again');
    await queuesDrained(t.queues, 10_000);
    expect(await everything()).toContain(marker);
    // The projection stream, where ingest hands the read models each event's changes, holds none of
    // them once projected (its entries deleted, the nodes that held them freed), so erasure has
    // nothing to look for there: not even the machine each event names (the read model keeps those).
    await readModelsProjected(t.redis, t.keys);
    const projection = ((await t.redis.dumpBuffer(t.keys.readModels.projection)) ?? Buffer.alloc(0)).toString('latin1');
    for (const event of [erased, other]) expect(projection).not.toContain(event.data.metadata.machine_id);

    expect((await api('DELETE', '/admin/v1/events/not-a-uuid')).statusCode).toBe(400);
    expect((await api('DELETE', `/admin/v1/events/${erased.event_id}`, webhook.key)).statusCode).toBe(403);
    const res = await api('DELETE', `/admin/v1/events/${erased.event_id}`);
    expect(res.statusCode).toBe(202);
    const taskId = res.json<{ task_id: string }>().task_id;
    expect(await finished(taskId)).toMatchObject({ status: 'success', fail_reason: null });

    const stored = await everything();
    expect(stored).not.toContain(marker);
    expect(stored).toContain(kept);
    // The other event's dead stream entry stays, readable; the crashed consumer's entry was acknowledged.
    expect(JSON.stringify(await t.redis.xrange(deadStream(), '-', '+'))).toContain(kept);
    expect(((await t.redis.xpending(stream(), GROUP)) as [number])[0]).toBe(0);
    const feed = (await api('GET', `/vendors/v1/webhooks/${webhook.id}/events`, webhook.key)).json<{
      events: { event_id: string }[];
    }>();
    expect(feed.events.map((e) => e.event_id)).not.toContain(erased.event_id);
    expect(feed.events).toHaveLength(1);
    expect(await t.deliveryLog.deadLetterCount(webhook.id)).toBe(1);
    const logged = logs.lines.find((line) => line.event === 'operator.erase' && line.taskId === taskId);
    expect(logged).toMatchObject({ kind: 'event', eventId: erased.event_id });
    expect(typeof logged?.keyId).toBe('string');
    expect(logs.lines.find((line) => line.event === 'erase.finished' && line.taskId === taskId)).toMatchObject({
      streamsAwaitingIngest: [],
    });

    // The stream's consumer goes on: a new event over the stream is ingested and delivered.
    const after = markedEvent(vendor, kept);
    await xaddEvents([after]);
    await waitFor(
      async () => (await t.deliveryLog.deadLetters(webhook.id, 10)).some((d) => d.eventId === after.event_id),
      15_000,
      'the event sent after the erasure',
    );
  });

  it('erases a vendor: webhooks, deliveries, payloads, sessions and keys, and nothing of another vendor', async () => {
    const vendor = 'vendor-erase-all';
    const other = 'vendor-erase-other';
    const marker = `MARK-${randomUUID()}`;
    const otherMarker = `OTHER-${randomUUID()}`;
    receiver.script('/ok', { status: 200 });
    const webhook = await t.register(vendor, `${receiver.base}/ok`);
    const second = await t.register(vendor, `${receiver.base}/failing`, { event_type: 'EVENT_TYPE_MACHINE_UPDATED' });
    const kept = await t.register(other, `${receiver.base}/ok`);
    // A paused FIFO webhook keyed by machine: its deliveries wait in its ordering key's lines, each
    // line's lease held as another worker's turn would hold it (the pause alone holds them only for
    // their retry window, 20 ms here, and a worker may drain them before they are looked for).
    const lined = await t.register(vendor, `${receiver.base}/ok`, {
      event_type: 'EVENT_TYPE_MACHINE_REMOVED',
      ordering: 'fifo',
      ordering_key: 'data.metadata.machine_id',
    });
    const partition = partitionOf(lined.id, t.queues.partitions.length);
    for (const line of linesOf(lined.id))
      await t.redis.set(t.keys.fifo.lease(partition, line), 'a turn elsewhere', 'PX', 60_000);
    expect(
      (
        await t.app.inject({
          method: 'PATCH',
          url: `/vendors/v1/webhooks/${lined.id}`,
          headers: { 'x-api-key': lined.key },
          payload: { enabled: false },
        })
      ).statusCode,
    ).toBe(200);
    const session = await api('POST', '/admin/v1/portal/sessions', admin, { vendor_id: vendor, permission: 'manage' });
    expect(session.statusCode).toBe(201);
    // Over HTTP and over the stream; a rejected event of each vendor lands in the dead stream.
    const deadBefore = await t.redis.xlen(deadStream());
    await postEvents([
      markedEvent(vendor, marker),
      { ...markedEvent(vendor, marker), event_type: 'EVENT_TYPE_MACHINE_REMOVED' },
      markedEvent(other, otherMarker),
    ]);
    await xaddEvents([
      { ...markedEvent(vendor, marker), event_type: 'EVENT_TYPE_MACHINE_UPDATED' },
      { ...markedEvent(vendor, marker), event_type: 'EVENT_TYPE_MACHINE_REMOVED' },
      rejected(markedEvent(vendor, marker)),
      rejected(markedEvent(other, otherMarker)),
    ]);
    await waitFor(
      async () => (await t.deliveryLog.deadLetterCount(second.id)) === 1,
      15_000,
      'the failing webhook’s dead letter',
    );
    await streamConsumed(0, deadBefore + 2);
    await queuesDrained(t.queues, 10_000);
    // The keyed line holds the paused webhook's two deliveries.
    expect(await everything()).toContain(`${lined.id}:k`);
    expect(await everything()).toContain(marker);

    const res = await api('DELETE', `/admin/v1/vendors/${vendor}/data`);
    expect(res.statusCode).toBe(202);
    expect(await finished(res.json<{ task_id: string }>().task_id)).toMatchObject({ status: 'success' });

    const stored = await everything();
    expect(stored).not.toContain(marker);
    expect(stored).not.toContain(webhook.id);
    expect(stored).not.toContain(second.id);
    expect(stored).not.toContain(lined.id);
    expect(stored).not.toContain(vendor + '"');
    expect(stored).toContain(otherMarker);
    // The other vendor's entry in the dead stream stays, readable.
    expect(JSON.stringify(await t.redis.xrange(deadStream(), '-', '+'))).toContain(otherMarker);
    // Its key and its portal session no longer open anything; the other vendor's webhook is as it was.
    expect((await api('GET', '/vendors/v1/webhooks', webhook.key)).statusCode).toBe(401);
    expect((await api('GET', `/admin/v1/portal/sessions?vendor_id=${vendor}`)).json()).toEqual({ sessions: [] });
    expect((await api('GET', `/vendors/v1/webhooks/${kept.id}`, kept.key)).statusCode).toBe(200);
    expect(logs.lines.find((line) => line.event === 'operator.erase' && line.vendorId === vendor)).toMatchObject({
      kind: 'vendor',
    });
  });
});
