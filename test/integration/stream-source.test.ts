import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  STREAM_GROUP_DEFAULT,
  StreamIngestSource,
  type StreamDeadLetterCause,
  type StreamIngestSourceOptions,
} from '../../src/ingest/stream-source.js';
import { ingestFixture, machine, sampleEvent, type IngestFixture } from '../helpers/ingest-app.js';
import { readModelsProjected } from '../helpers/read-models.js';
import { quiescent, waitFor } from '../helpers/wait.js';

const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const GROUP = STREAM_GROUP_DEFAULT;

interface LogLine {
  level: number;
  msg: string;
  entryId?: string;
  reason?: string;
}

let f: IngestFixture;
let logs: LogLine[];
let sources: StreamIngestSource[];
let deadLetterCauses: StreamDeadLetterCause[];

beforeEach(() => {
  f = ingestFixture();
  logs = [];
  sources = [];
  deadLetterCauses = [];
});
afterEach(async () => {
  for (const source of sources) await source.stop();
  await f.cleanup();
});

function source(options: Partial<StreamIngestSourceOptions> = {}): StreamIngestSource {
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logs.push(JSON.parse(chunk.toString()) as LogLine);
      done();
    },
  });
  const created = new StreamIngestSource({
    redis: f.redis,
    stream: f.keys.events.stream,
    deadLetterStream: f.keys.events.deadOf(0),
    observeDeadLetter: (cause) => deadLetterCauses.push(cause),
    ingestor: f.ingestor,
    logger: pino({ level: 'info' }, destination),
    blockMs: 100,
    maintenanceIntervalMs: 100,
    retryBaseMs: 20,
    retryMaxMs: 100,
    ...options,
  });
  sources.push(created);
  return created;
}

const stream = () => f.keys.events.stream;
const add = (event: unknown) =>
  f.redis.xadd(stream(), '*', 'event', typeof event === 'string' ? event : JSON.stringify(event)) as Promise<string>;
const pendingCount = async () => Number(((await f.redis.xpending(stream(), GROUP)) as [number])[0]);
/** The dead-letter stream's entries, each as its field map (the fields in order, as written). */
const deadLetters = async () =>
  (await f.redis.xrange(f.keys.events.deadOf(0), '-', '+')).map(([, fields]) => {
    const map: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) map[fields[i]!] = fields[i + 1]!;
    return map;
  });
/** An ingestor with a bug that only some events trip (those of machine `m-bug`): it fails any batch that holds one. */
const buggyIngestor = (): StreamIngestSourceOptions['ingestor'] => ({
  ingest: (events, source) =>
    events.some(
      (event) => (event as { data?: { metadata?: { machine_id?: string } } }).data?.metadata?.machine_id === 'm-bug',
    )
      ? Promise.reject(new TypeError("Cannot read properties of undefined (reading 'gpus')"))
      : f.ingestor.ingest(events, source),
});
const bugEvent = (eventId: string) => ({
  ...sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: eventId }),
  data: machine('m-bug'),
});

describe('StreamIngestSource', () => {
  it('ingests appended events, delivers them and acknowledges the entries', async () => {
    const webhookId = await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    // Appended before the group exists: still ingested (the group starts at the beginning).
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) }));
    await source().start();
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }));
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(3) }));

    await waitFor(() => f.enqueuer.requests.length === 3, 5_000, 'three deliveries');
    expect(f.enqueuer.requests.map((r) => [r.eventId, r.webhookId])).toEqual([1, 2, 3].map((n) => [id(n), webhookId]));
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    await readModelsProjected(f.redis, f.keys);
    expect(await f.machines.get('m-1')).toBeDefined();
  });

  it('acknowledges malformed and rejected entries, logs them, and goes on', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    await source().start();
    const notJson = await add('{"event_type": ');
    const noEventField = (await f.redis.xadd(stream(), '*', 'payload', '{}'))!;
    const rejected = await add({
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      vendor_id: 'v-1',
      data: { status: 'available', metadata: {} },
    });
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(4) }));

    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the valid event');
    expect(f.enqueuer.requests[0]!.eventId).toBe(id(4));
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    const skipped = logs.filter((line) => line.entryId !== undefined).map((line) => [line.entryId, line.reason]);
    expect(skipped).toEqual([
      [notJson, expect.stringMatching(/^the "event" field is not valid JSON/)],
      [noEventField, 'the entry has no "event" field'],
      [rejected, 'data.metadata.machine_id: required'],
    ]);
    // Kept, with their fields as written, in the dead-letter stream.
    expect(
      (await deadLetters()).map(({ entry_id, reason, event, payload }) => ({ entry_id, reason, event, payload })),
    ).toEqual([
      {
        entry_id: notJson,
        reason: 'the "event" field is not valid JSON',
        event: '{"event_type": ',
        payload: undefined,
      },
      { entry_id: noEventField, reason: 'the entry has no "event" field', event: undefined, payload: '{}' },
      {
        entry_id: rejected,
        reason: 'data.metadata.machine_id: required',
        event: expect.stringContaining('"metadata":{}') as unknown,
        payload: undefined,
      },
    ]);
    expect(deadLetterCauses).toEqual(['unreadable', 'unreadable', 'rejected']);
  });

  it('acknowledges an entry whose event is not valid UTF-8 without ingesting it; valid UTF-8 (U+FFFD included) goes through', async () => {
    const webhookId = await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    await source().start();
    const event = (eventId: string, cuda: string) =>
      JSON.stringify({
        ...sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: eventId }),
        data: { status: 'available', metadata: { machine_id: `m-${eventId.slice(-2)}`, cuda_version: cuda } },
      });
    const [before, after] = event(id(7), '@@').split('@@') as [string, string];
    const notUtf8 = (await f.redis.xadd(
      stream(),
      '*',
      'event',
      Buffer.concat([Buffer.from(before), Buffer.from([0xc3, 0x28, 0xed, 0xa0, 0x80]), Buffer.from(after)]),
    ))!;
    await add(event(id(8), '12.4 \ufffd é 🚀 中文'));

    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the valid event');
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    expect(f.enqueuer.requests.map((r) => [r.eventId, r.webhookId])).toEqual([[id(8), webhookId]]);
    expect(
      (JSON.parse(f.enqueuer.requests[0]!.body) as { data: { metadata: { cuda_version: string } } }).data.metadata
        .cuda_version,
    ).toBe('12.4 \ufffd é 🚀 中文');
    expect(await f.seen(id(7))).toEqual([false]);
    await readModelsProjected(f.redis, f.keys);
    expect(await f.machines.get('m-07')).toBeUndefined();
    const skipped = logs.filter((line) => line.entryId !== undefined).map((line) => [line.entryId, line.reason]);
    expect(skipped).toEqual([[notUtf8, 'the "event" field is not valid UTF-8; JSON must be UTF-8 (RFC 8259)']]);
  });

  it('sets a poison event (nested 20,000 levels deep) aside in the dead-letter stream with its reason, and ingests what follows it', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    await source().start();
    const levels = 20_000;
    const poisonJson = JSON.stringify(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) })).replace(
      '"data":{',
      `"data":{"deep":${'['.repeat(levels)}1${']'.repeat(levels)},`,
    );
    const startedMs = Date.now();
    const poison = await add(poisonJson);
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }));

    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the event after the poison delivered');
    expect(f.enqueuer.requests[0]!.eventId).toBe(id(2));
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    const reason = 'data: nested more than 64 levels deep (objects and arrays within one another)';
    const [kept, ...others] = await deadLetters();
    expect(others).toEqual([]);
    expect(kept).toEqual({ reason, failed_at: expect.any(String) as unknown, entry_id: poison, event: poisonJson });
    expect(Date.parse(kept!.failed_at!)).toBeGreaterThanOrEqual(startedMs - 1_000);
    expect(deadLetterCauses).toEqual(['rejected']);
    expect(
      logs.filter((line) => line.entryId !== undefined).map((line) => [line.msg, line.entryId, line.reason]),
    ).toEqual([['ingest stream: entry set aside', poison, reason]]);
  });

  it('splits a batch that ingest fails on to find the entry that fails alone, sets it aside, and ingests the rest', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    // Appended before the consumer starts, so that they are read as one batch.
    await f.redis.xgroup('CREATE', stream(), GROUP, '0', 'MKSTREAM');
    const ids = [1, 2, 3, 4, 5, 6].map(id);
    const entryIds: string[] = [];
    for (const [i, eventId] of ids.entries())
      entryIds.push(
        await add(
          i === 4 ? bugEvent(eventId) : sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: eventId }),
        ),
      );
    await source({ ingestor: buggyIngestor() }).start();

    await waitFor(
      async () => (await pendingCount()) === 0 && (await deadLetters()).length === 1,
      5_000,
      'the batch acknowledged',
    );
    expect(f.enqueuer.requests.map((r) => r.eventId).sort()).toEqual([id(1), id(2), id(3), id(4), id(6)]);
    expect(await f.seen(id(5))).toEqual([false]);
    const reason = "ingest failed on this entry alone: TypeError: Cannot read properties of undefined (reading 'gpus')";
    expect(await deadLetters()).toEqual([
      {
        reason,
        failed_at: expect.any(String) as unknown,
        entry_id: entryIds[4],
        event: JSON.stringify(bugEvent(id(5))),
      },
    ]);
    expect(deadLetterCauses).toEqual(['failed']);
    const lines = logs.filter((line) => line.entryId !== undefined);
    expect(lines.map((line) => [line.msg, line.entryId, line.reason])).toEqual([
      ['ingest stream: entry set aside', entryIds[4], reason],
    ]);
    // The log line names the entry, never its content.
    expect(JSON.stringify(lines)).not.toContain('m-bug');
  });

  it('keeps a lone entry that fails pending until another entry goes through beside it, then sets it aside', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    await source({ ingestor: buggyIngestor() }).start();
    const bug = await add(bugEvent(id(1)));
    // Alone, it cannot be told from a failure of ingest itself: it stays pending and is retried.
    await waitFor(
      () => logs.filter((line) => line.msg.includes('batch failed')).length >= 2,
      5_000,
      'two failed attempts',
    );
    expect(await pendingCount()).toBe(1);
    expect(await deadLetters()).toEqual([]);

    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }));
    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the next entry ingested beside the pending one');
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    expect((await deadLetters()).map((entry) => entry.entry_id)).toEqual([bug]);
    expect(deadLetterCauses).toEqual(['failed']);
  });

  it('sets nothing aside when every entry fails (ingest itself is failing): all stay pending and are ingested after recovery', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_CREATED');
    f.enqueuer.failure = new Error('queue unavailable');
    await f.redis.xgroup('CREATE', stream(), GROUP, '0', 'MKSTREAM');
    for (const n of [1, 2, 3, 4]) await add(sampleEvent('EVENT_TYPE_DEPLOYMENT_CREATED', 'v-1', { event_id: id(n) }));
    await source().start();

    await waitFor(
      () => logs.filter((line) => line.msg.includes('batch failed')).length >= 2,
      5_000,
      'two failed attempts',
    );
    expect(await pendingCount()).toBe(4);
    expect(await deadLetters()).toEqual([]);
    f.enqueuer.failure = undefined;
    await waitFor(() => f.enqueuer.requests.length === 4, 5_000, 'every delivery');
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    expect(await deadLetters()).toEqual([]);
    expect(deadLetterCauses).toEqual([]);
  });

  it('leaves entries pending while ingest fails and ingests them after recovery', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_CREATED');
    f.enqueuer.failure = new Error('queue unavailable');
    await source().start();
    await add(sampleEvent('EVENT_TYPE_DEPLOYMENT_CREATED', 'v-1', { event_id: id(5) }));

    await waitFor(
      () => logs.filter((line) => line.msg.includes('batch failed')).length >= 2,
      5_000,
      'two failed attempts',
    );
    expect(await pendingCount()).toBe(1);
    expect(await f.seen(id(5))).toEqual([false]);
    expect(f.enqueuer.requests).toEqual([]);

    f.enqueuer.failure = undefined;
    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the delivery');
    expect(f.enqueuer.requests[0]!.eventId).toBe(id(5));
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
  });

  it('claims a dead consumer’s stale entries, ingests them, and prunes the dead consumer', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_UPDATED');
    await f.redis.xgroup('CREATE', stream(), GROUP, '0', 'MKSTREAM');
    await add(sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', { event_id: id(6) }));
    // A consumer reads the entry and dies before acknowledging it.
    await f.redis.xreadgroup('GROUP', GROUP, 'dead-consumer', 'COUNT', 10, 'STREAMS', stream(), '>');
    expect(await pendingCount()).toBe(1);

    const live = source({ claimMinIdleMs: 150, consumerIdleMaxMs: 150 });
    await live.start();
    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the claimed delivery');
    expect(f.enqueuer.requests[0]!.eventId).toBe(id(6));
    await waitFor(async () => (await pendingCount()) === 0, 5_000, 'no pending entries');
    await waitFor(
      async () => {
        const consumers = (await f.redis.xinfo('CONSUMERS', stream(), GROUP)) as string[][];
        return consumers.every((consumer) => consumer[1] !== 'dead-consumer');
      },
      5_000,
      'the dead consumer pruned',
    );
  });

  it('trims acknowledged entries but never one still pending', async () => {
    await f.redis.xgroup('CREATE', stream(), GROUP, '0', 'MKSTREAM');
    const first = await add(sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', { event_id: id(1) }));
    // A live but slow consumer holds the first entry (not idle long enough to be claimed).
    await f.redis.xreadgroup('GROUP', GROUP, 'slow-consumer', 'COUNT', 1, 'STREAMS', stream(), '>');
    for (let n = 2; n <= 350; n += 1)
      await add({
        event_type: 'TASK_UPDATED',
        event_id: id(n),
        data: { task_id: id(n), status: 'pending', fail_reason: null },
      });

    await source({ claimMinIdleMs: 60_000 }).start();
    await waitFor(async () => (await pendingCount()) === 1, 10_000, 'the backlog ingested');
    // Through the maintenance passes meanwhile, nothing may be trimmed below the pending entry.
    expect(await quiescent(() => f.redis.xlen(stream()), 300, 5_000, 'the stream length')).toBe(350);
    expect(await f.redis.xrange(stream(), first, first)).toHaveLength(1);

    // Once the slow consumer acknowledges, every entry is done with: the stream keeps none of them,
    // its last node included (an idle stream would otherwise keep its last events' payloads).
    await f.redis.xack(stream(), GROUP, first);
    await waitFor(async () => (await f.redis.xlen(stream())) === 0, 5_000, 'the stream trimmed');
  });

  it('stops gracefully: leaves the group and consumes nothing afterwards', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const consumer = source({ blockMs: 2_000 });
    await consumer.start();
    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) }));
    await waitFor(() => f.enqueuer.requests.length === 1, 5_000, 'the first delivery');

    const stoppedAt = Date.now();
    await consumer.stop();
    // The blocked read is ended at once rather than waited out (blockMs is 2 s here).
    expect(Date.now() - stoppedAt).toBeLessThan(1_000);
    const consumers = (await f.redis.xinfo('CONSUMERS', stream(), GROUP)) as string[][];
    expect(consumers.map((c) => c[1])).not.toContain(consumer.consumerName);

    await add(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }));
    expect(await quiescent(() => f.enqueuer.requests.length, 200, 5_000, 'deliveries after stop')).toBe(1);
    await expect(consumer.start()).rejects.toThrow(/started once/);
  });
});

describe('several ingest streams (HOOKLINE_INGEST_STREAMS)', () => {
  it('a worker consumes every stream: events appended to any of them are delivered, each once', async () => {
    const { testApp } = await import('../helpers/app.js');
    const { startTestWorker } = await import('../helpers/worker.js');
    const { TestReceiver } = await import('../helpers/receiver.js');
    const t = await testApp();
    const receiver = new TestReceiver();
    await receiver.start();
    const worker = await startTestWorker(t, { ingestStream: true, ingestStreams: 3 });
    try {
      await t.register('v-streams', `${receiver.base}/in`);
      const streams = [0, 1, 2].map((n) => t.keys.events.streamOf(n));
      // Stream 0 is the documented {prefix:ingest}:events; the others carry hash tags of their own.
      expect(streams[0]).toBe(t.keys.events.stream);
      expect(new Set(streams.map((key) => /^\{[^}]+\}/.exec(key)![0])).size).toBe(3);
      const ids = [id(101), id(102), id(103), id(104), id(105), id(106)];
      for (const [i, eventId] of ids.entries()) {
        await t.redis.xadd(
          streams[i % 3]!,
          '*',
          'event',
          JSON.stringify(sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-streams', { event_id: eventId })),
        );
      }
      await waitFor(() => receiver.requests.length >= ids.length, 10_000, 'a delivery per event');
      const got = receiver.requests.map((r) => (JSON.parse(r.body) as { event_id: string }).event_id);
      expect(got.sort()).toEqual([...ids].sort());

      // Each stream sets its unreadable entries aside in its own dead-letter stream, on its own slot, and counts them.
      const unreadable = (await t.redis.xadd(streams[2]!, '*', 'event', '{"event_type":'))!;
      await waitFor(async () => (await t.redis.xlen(t.keys.events.deadOf(2))) === 1, 10_000, 'the entry set aside');
      expect((await t.redis.xrange(t.keys.events.deadOf(2), '-', '+'))[0]![1]).toContain(unreadable);
      expect(await t.redis.xlen(t.keys.events.deadOf(0))).toBe(0);
      expect(await worker.metricsText()).toMatch(
        /^hookline_ingest_stream_dead_letters_total\{cause="unreadable",role="worker"\} 1$/m,
      );
    } finally {
      await worker.close();
      await receiver.close();
      await t.close();
    }
  });
});
