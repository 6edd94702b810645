import { afterEach, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/delivery/jobs.js';
import { bucketOfKeyValue, ORDERING_KEY_BUCKETS } from '../../src/domain/ordering-key.js';
import { lineIdOf, webhookOfLine } from '../../src/store/fifo-lines.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent, machineEventFor } from '../helpers/events.js';
import { KeyedReceiver, machineIdsOfDistinctLines } from '../helpers/keyed-receiver.js';
import { servedDocument } from '../helpers/openapi.js';
import { lcg } from '../helpers/random.js';
import { receiverPool } from '../helpers/receiver.js';
import { commandsNaming } from '../helpers/redis.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const ORDERING_KEY = 'data.metadata.machine_id';
const eventIdOf = (body: string) => (JSON.parse(body) as { event_id: string }).event_id;
/** The bucket of a machine id as an ordering-key value. */
const bucketOf = (machineId: string) => bucketOfKeyValue(JSON.stringify(machineId));

/** Every key of a webhook's lines (SCAN over its partition's `fifo:<webhook id>` keys). */
async function lineKeysOf(t: TestApp, webhookId: string): Promise<string[]> {
  const n = partitionOf(webhookId, t.queues.partitions.length);
  const pattern = `${t.keys.deliveryQueuePrefix(n)}:fifo:${webhookId}*`;
  const found: string[] = [];
  let cursor = '0';
  for (let round = 0; round < 100_000; round++) {
    const [next, keys] = await t.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1_000);
    found.push(...keys);
    cursor = next;
    if (cursor === '0') break;
  }
  return found;
}

/** The ids of a webhook's lines in its partition's ready set. */
async function readyLinesOf(t: TestApp, webhookId: string): Promise<string[]> {
  const n = partitionOf(webhookId, t.queues.partitions.length);
  return (await t.redis.zrange(t.keys.fifo.ready(n), 0, -1)).filter((line) => webhookOfLine(line) === webhookId);
}

/** The ids of a webhook's lines in its partition's heads index (lines whose head is counted as waiting). */
async function headLinesOf(t: TestApp, webhookId: string): Promise<string[]> {
  const n = partitionOf(webhookId, t.queues.partitions.length);
  return (await t.redis.zrange(t.keys.fifo.heads(n), 0, -1)).filter((line) => webhookOfLine(line) === webhookId);
}

/** Bytes Redis holds for `keys`, by MEMORY USAGE (every element counted: SAMPLES 0). */
async function memoryOf(t: TestApp, keys: readonly string[]): Promise<number> {
  const sizes = await Promise.all(keys.map((key) => t.redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')));
  return sizes.reduce<number>((sum, size) => sum + Number(size ?? 0), 0);
}

describe('FIFO ordering per ordering key', () => {
  let t: TestApp | undefined;
  let keyed: KeyedReceiver | undefined;
  const workers: TestWorker[] = [];
  const receivers = receiverPool();

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    await receivers.closeAll();
    await keyed?.close();
    keyed = undefined;
    await t?.close();
    t = undefined;
  });

  /** Ingests `events` in one call; all must be accepted. */
  async function ingest(app: TestApp, events: object[]): Promise<void> {
    const results = await app.ingestor.ingest(events, 'http');
    expect(results.every((r) => r.status === 'accepted')).toBe(true);
  }

  it('per key value: accept order through random failures (30 %), and a value that keeps failing holds back only its own line', async () => {
    // Ten quick retries, then forty every 200 ms: a head failing at random is back within 20 ms, and
    // the value that keeps failing is not dead-lettered before the others are done (8 s).
    t = await testApp({ retryScheduleMs: [0, ...Array<number>(10).fill(20), ...Array<number>(40).fill(200)] });
    keyed = new KeyedReceiver(0.3, lcg(7));
    const base = await keyed.start();
    const webhook = await t.register('keyed', `${base}/in`, { ordering: 'fifo', ordering_key: ORDERING_KEY });
    const keys = machineIdsOfDistinctLines(6);
    const stuck = keys[0]!;
    keyed.failing.add(stuck);
    workers.push(await startTestWorker(t), await startTestWorker(t));

    // Twenty bursts of fifteen events, the values interleaved at random within and across bursts.
    const pick = lcg(11);
    const acceptOrder = new Map<string, string[]>(keys.map((key) => [key, []]));
    for (let burst = 0; burst < 20; burst++) {
      const events = Array.from({ length: 15 }, () =>
        machineEventFor('keyed', keys[Math.floor(pick() * keys.length)]!),
      );
      await ingest(t, events);
      for (const e of events) acceptOrder.get(e.data.metadata.machine_id)!.push(e.event_id);
    }
    const others = keys.slice(1);
    const othersTotal = others.reduce((sum, key) => sum + acceptOrder.get(key)!.length, 0);
    const othersDone = () =>
      others.every((key) => keyed!.firstSuccessesOf(key).length === acceptOrder.get(key)!.length);
    await waitFor(othersDone, 20_000, 'every delivery of the values that do not fail for good');
    const stuckAttempts = keyed.received.filter((r) => r.key === stuck).length;
    const failures = keyed.received.length - keyed.succeeded.length;
    console.log(
      `fifo-key random failures: ${othersTotal} events of ${others.length} values delivered while ${stuck}'s ` +
        `${acceptOrder.get(stuck)!.length} waited behind a head tried ${stuckAttempts} times; ${failures} failed answers`,
    );
    // The others finished while the failing value's head was still being retried, unsent past it.
    expect(keyed.failing.has(stuck)).toBe(true);
    expect(keyed.firstSuccessesOf(stuck)).toEqual([]);
    expect(stuckAttempts).toBeGreaterThanOrEqual(1);
    expect(new Set(keyed.received.filter((r) => r.key === stuck).map((r) => r.eventId))).toEqual(
      new Set([acceptOrder.get(stuck)![0]]),
    );
    expect(failures - stuckAttempts, 'random failures happened').toBeGreaterThan(30);
    await waitFor(
      async () => (await t!.fifoLines.summary(webhook.id)).length === acceptOrder.get(stuck)!.length,
      5_000,
      'only the failing value left in the lines',
    );

    keyed.failing.delete(stuck);
    await waitFor(
      () => keyed!.firstSuccessesOf(stuck).length === acceptOrder.get(stuck)!.length,
      20_000,
      'the failing value’s deliveries once it recovers',
    );
    for (const key of keys) expect(keyed.firstSuccessesOf(key), `${key} in accept order`).toEqual(acceptOrder.get(key));
    expect(await t.deliveryLog.deadLetters(webhook.id, 10)).toEqual([]);
  }, 60_000);

  /**
   * A new keyed webhook: its lines all start at once, toward an endpoint no attempt has answered yet,
   * so every head but one finds the first contact in flight. With a delivery timeout of 30 s, a line
   * that waited for the contact's timeout (or for the deferral's hold) would take 30 s or more; each
   * must follow the contact's answer instead. `firstAnswerMs`: how long the receiver holds that first
   * contact's answer (0: answered at once, waited for in the process; 1 s: the heads are deferred,
   * and woken when it answers).
   */
  it.each([
    ['at once', 0],
    ['after 1 s', 1_000],
  ])(
    'a new keyed webhook’s lines all start when its first contact is answered (%s), not a timeout later',
    async (_name, firstAnswerMs) => {
      t = await testApp({ retryScheduleMs: [0, 1_000] });
      keyed = new KeyedReceiver(0);
      if (firstAnswerMs > 0) keyed.holdAt(1, firstAnswerMs);
      const base = await keyed.start();
      await t.register('fresh', `${base}/in`, { ordering: 'fifo', ordering_key: ORDERING_KEY });
      const outcomes: string[] = [];
      workers.push(
        await startTestWorker(t, {
          deliveryTimeoutMs: 30_000,
          onOutcome: (o) => outcomes.push(o.kind === 'deferred' ? `deferred:${o.reason}` : o.kind),
        }),
      );
      const machines = machineIdsOfDistinctLines(3);
      const events = Array.from({ length: 30 }, (_, i) => machineEventFor('fresh', machines[i % 3]!));
      const startedMs = Date.now();
      await ingest(t, events);
      await waitFor(() => keyed!.succeeded.length >= 30, 10_000, 'all 30 deliveries, well before a timeout');
      const tookMs = Date.now() - startedMs;
      console.log(
        `fifo-key first contact answered ${firstAnswerMs} ms late: 30 deliveries on 3 lines in ${tookMs} ms; ` +
          `held back ${outcomes.filter((o) => o.startsWith('deferred')).length} times`,
      );
      for (const machine of machines)
        expect(keyed.firstSuccessesOf(machine)).toEqual(
          events.filter((e) => e.data.metadata.machine_id === machine).map((e) => e.event_id),
        );
      expect(keyed.received).toHaveLength(30);
    },
  );

  it('5,000 key values make at most 64 lines, whose keys are bounded, measured, and gone once drained', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000] });
    const receiver = await receivers.start();
    const webhook = await t.register('many', `${receiver.base}/in`, { ordering: 'fifo', ordering_key: ORDERING_KEY });
    const n = partitionOf(webhook.id, t.queues.partitions.length);

    // One line by itself first: what a line costs beside the job it holds, and its lease and ready entry.
    const cost = 'w-cost';
    const costPartition = partitionOf(cost, t.queues.partitions.length);
    const job = {
      deliveryId: 'd-cost',
      eventId: 'e-cost',
      eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
      vendorId: 'v',
      webhookId: cost,
      body: '{}',
      acceptedAtMs: 1,
    };
    await t.fifoLines.append([{ job, bucket: 3 }], Date.now());
    const costLine = lineIdOf(cost, 3);
    const { fifo } = t.keys;
    const lineBytes = await memoryOf(t, [
      fifo.seq(costPartition, costLine),
      fifo.line(costPartition, costLine),
      fifo.jobs(costPartition, costLine),
    ]);
    const jobBytes = JSON.stringify(job).length;
    expect(await t.fifoLines.claim(costLine, 'token', Date.now(), 10_000)).toBe(true);
    const leaseBytes = await memoryOf(t, [fifo.lease(costPartition, costLine)]);

    const VALUES = 5_000;
    const acceptOrder: string[] = [];
    for (let i = 0; i < VALUES; i += 500) {
      const events = Array.from({ length: 500 }, () => machineEvent('many'));
      await ingest(t, events);
      acceptOrder.push(...events.map((e) => e.event_id));
    }
    expect(new Set(acceptOrder).size).toBe(VALUES);
    const keys = await lineKeysOf(t, webhook.id);
    const lines = new Set(keys.map((key) => key.slice(0, key.lastIndexOf(':'))));
    const ownPrefix = `${fifo.line(n, webhook.id)}`;
    const held = await memoryOf(t, keys);
    const jobsJson = (await Promise.all(keys.filter((k) => k.endsWith(':jobs')).map((k) => t!.redis.hvals(k))))
      .flat()
      .reduce((sum, text) => sum + text.length, 0);
    // The ready set of the webhook's partition, by entry (the line by itself above may share it).
    const ready = fifo.ready(n);
    const readyBytes = Math.round((await memoryOf(t, [ready])) / (await t.redis.zcard(ready)));
    const heads = fifo.heads(n);
    const headsBytes = Math.round((await memoryOf(t, [heads])) / (await t.redis.zcard(heads)));
    console.log(
      `fifo-key lines: ${VALUES} key values → ${lines.size} lines, ${keys.length} keys, ${held} bytes ` +
        `(${jobsJson} of them job JSON: ${((held - jobsJson) / VALUES).toFixed(0)} bytes a delivery beside its job); ` +
        `one line holding one delivery: ${lineBytes - jobBytes} bytes beside its ${jobBytes}-byte job, ` +
        `its lease ${leaseBytes} bytes, an entry of a ready set of ${await t.redis.zcard(ready)} about ${readyBytes} bytes, ` +
        `of its heads index about ${headsBytes} bytes`,
    );
    expect(lines.size).toBeLessThanOrEqual(ORDERING_KEY_BUCKETS);
    // Every value had a key: the webhook's own line was never made.
    expect(keys.some((key) => key.startsWith(ownPrefix))).toBe(false);
    // Sequence, sorted set and jobs a line; no lease before a worker takes one.
    expect(keys.length).toBeLessThanOrEqual(3 * ORDERING_KEY_BUCKETS);
    expect((await readyLinesOf(t, webhook.id)).length).toBe(lines.size);
    // Every line's head is counted as waiting, from the append that started its line.
    expect((await headLinesOf(t, webhook.id)).sort()).toEqual((await readyLinesOf(t, webhook.id)).sort());
    expect(lineBytes - jobBytes).toBeLessThan(1_024);

    workers.push(await startTestWorker(t), await startTestWorker(t));
    await waitFor(
      () => new Set(receiver.requests.map((r) => eventIdOf(r.body))).size >= VALUES,
      60_000,
      'every delivery',
    );
    expect(receiver.requests).toHaveLength(VALUES);
    // Drained: no key of any line is left, and no entry in the ready set or the heads index.
    await waitFor(
      async () => (await lineKeysOf(t!, webhook.id)).length === 0 && (await readyLinesOf(t!, webhook.id)).length === 0,
      10_000,
      'no line key left',
    );
    expect(await headLinesOf(t, webhook.id)).toEqual([]);
    expect(await t.fifoLines.summary(webhook.id)).toEqual({ length: 0, headAcceptedAtMs: undefined });
  }, 90_000);

  it('changing the ordering key with deliveries in the lines loses and repeats none; each line keeps its order', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 200, delayMs: 2 });
    const webhook = await t.register('change', `${receiver.base}/in`, { ordering: 'fifo' });
    const keys = machineIdsOfDistinctLines(3);
    const patch = async (body: object) => {
      const res = await t!.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhook.id}`,
        headers: { 'x-api-key': webhook.key },
        payload: body,
      });
      expect(res.statusCode, res.body).toBe(200);
    };
    const phase = async () => {
      const events = Array.from({ length: 30 }, (_, i) => machineEventFor('change', keys[i % keys.length]!));
      await ingest(t!, events);
      return events;
    };
    // No key, then by machine id, then by status (one value: one line), then no key again; no worker yet.
    const unkeyed = await phase();
    await patch({ ordering_key: ORDERING_KEY });
    const byMachine = await phase();
    await patch({ ordering_key: 'data.status' });
    const byStatus = await phase();
    await patch({ ordering_key: null });
    const unkeyedAgain = await phase();
    const all = [...unkeyed, ...byMachine, ...byStatus, ...unkeyedAgain];
    expect((await t.fifoLines.summary(webhook.id)).length).toBe(all.length);
    const lines = new Set((await lineKeysOf(t, webhook.id)).map((key) => key.slice(0, key.lastIndexOf(':'))));
    // The webhook's own line, one per machine id, and one for the status value (which may share a machine id's).
    expect(lines.size).toBeGreaterThanOrEqual(1 + keys.length);
    expect(lines.size).toBeLessThanOrEqual(2 + keys.length);

    workers.push(await startTestWorker(t));
    await waitFor(() => receiver.requests.length >= all.length, 15_000, 'every delivery');
    const arrived = receiver.requests.map((r) => eventIdOf(r.body));
    expect(await quiescent(() => receiver.requests.length, 300, 5_000, 'nothing more sent'), 'none sent twice').toBe(
      all.length,
    );
    expect(new Set(arrived)).toEqual(new Set(all.map((e) => e.event_id)));
    const order = (events: typeof all) => arrived.filter((id) => events.some((e) => e.event_id === id));
    const ids = (events: typeof all) => events.map((e) => e.event_id);
    // The webhook's own line before and after: one line, in accept order.
    expect(order([...unkeyed, ...unkeyedAgain])).toEqual(ids([...unkeyed, ...unkeyedAgain]));
    // Each machine id's line while keyed by it, and the status line.
    for (const key of keys) {
      const ofKey = byMachine.filter((e) => e.data.metadata.machine_id === key);
      expect(order(ofKey)).toEqual(ids(ofKey));
    }
    expect(order(byStatus)).toEqual(ids(byStatus));
    await waitFor(async () => (await lineKeysOf(t!, webhook.id)).length === 0, 5_000, 'no line key left');
    // The lines of every key the webhook had left no entry in the heads index either.
    expect(await headLinesOf(t, webhook.id)).toEqual([]);
  });

  it('ingest appends to every line of a partition in one script; a replay joins its key value’s line', async () => {
    t = await testApp({ queuePartitions: 1 });
    const receiver = await receivers.start();
    const webhook = await t.register('trips', `${receiver.base}/in`, { ordering: 'fifo', ordering_key: 'data.rack' });
    const racks = machineIdsOfDistinctLines(8);
    // Forty events over eight racks, and two without one (the webhook's own line).
    const racked = (rack: string | undefined) => {
      const event = machineEvent('trips');
      return rack === undefined ? event : { ...event, data: { ...event.data, rack } };
    };
    const events = [
      ...Array.from({ length: 40 }, (_, i) => racked(racks[i % racks.length])),
      racked(undefined),
      racked(undefined),
    ];
    const commands = await commandsNaming(t.redis, t.keys.deliveryQueuePrefix(0), () => ingest(t!, events));
    console.log(
      `fifo-key ingest of 42 events to 9 lines: ${commands.filter((c) => c === 'evalsha').length} script call`,
    );
    expect(commands.filter((c) => c === 'evalsha')).toHaveLength(1);
    const lineLength = (line: string) => t!.redis.zcard(t!.keys.fifo.line(0, line));
    for (const rack of racks) expect(await lineLength(lineIdOf(webhook.id, bucketOf(rack)))).toBe(5);
    expect(await lineLength(webhook.id)).toBe(2);

    // A replay of a delivery of racks[0] joins the end of that rack's line.
    const { vendor_id: _vendor, ...envelope } = events[0]!;
    const replay = {
      deliveryId: 'replayed-delivery',
      eventId: events[0]!.event_id,
      eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
      vendorId: 'trips',
      webhookId: webhook.id,
      body: JSON.stringify(envelope),
      acceptedAtMs: Date.now(),
      replayOf: 'original-delivery',
    };
    await t.queues.add([replay]);
    const line = lineIdOf(webhook.id, bucketOf(racks[0]!));
    expect(await lineLength(line)).toBe(6);
    expect(await t.redis.zrange(t.keys.fifo.line(0, line), -1, -1)).toEqual(['replayed-delivery']);
  });

  it('a paused keyed webhook holds every line at its head, unsent; enabled, each goes on, in order per value', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000, 60_000] });
    const receiver = await receivers.start();
    const webhook = await t.register('paused', `${receiver.base}/in`, { ordering: 'fifo', ordering_key: ORDERING_KEY });
    const patch = (body: object) =>
      t!.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhook.id}`,
        headers: { 'x-api-key': webhook.key },
        payload: body,
      });
    const keys = machineIdsOfDistinctLines(3);
    const events = Array.from({ length: 9 }, (_, i) => machineEventFor('paused', keys[i % keys.length]!));
    await ingest(t, events);
    expect((await patch({ enabled: false })).statusCode).toBe(200);
    const worker = await startTestWorker(t);
    workers.push(worker);
    const heads = new Set<string>(events.slice(0, keys.length).map((e) => e.event_id));
    await waitFor(
      () =>
        new Set(
          worker.outcomes
            .filter((o) => o.kind === 'deferred' && o.reason === 'webhook_paused')
            .map((o) => o.job.eventId),
        ).size >= keys.length,
      10_000,
      'every line’s head held',
    );
    const held = worker.outcomes.filter((o) => o.kind === 'deferred').map((o) => o.job.eventId);
    expect(new Set(held)).toEqual(heads);
    expect(await quiescent(() => receiver.requests.length, 500, 10_000, 'nothing sent while paused')).toBe(0);
    // No line's head held for the pause is counted as waiting.
    expect(await headLinesOf(t, webhook.id)).toEqual([]);

    expect((await patch({ enabled: true })).statusCode).toBe(200);
    await waitFor(() => receiver.requests.length >= events.length, 10_000, 'every line after enable');
    const arrived = receiver.requests.map((r) => eventIdOf(r.body));
    for (const key of keys) {
      const ofKey: string[] = events.filter((e) => e.data.metadata.machine_id === key).map((e) => e.event_id);
      expect(arrived.filter((id) => ofKey.includes(id))).toEqual(ofKey);
    }
    // Counted again from the enable, then gone with their lines.
    await waitFor(async () => (await lineKeysOf(t!, webhook.id)).length === 0, 5_000, 'no line key left');
    expect(await headLinesOf(t, webhook.id)).toEqual([]);
  });

  it('ordering_key on the API: set on POST and PATCH (null removes it), shown on GET and list and in the OpenAPI document; refused without fifo or with a bad path', async () => {
    t = await testApp();
    const key = await t.keyFor(['vendor'], 'v-key');
    const post = (body: object, headers: Record<string, string> = { 'x-api-key': key }) =>
      t!.app.inject({ method: 'POST', url: '/vendors/v1/webhooks', headers, payload: body });
    const patch = (id: string, body: object, headers: Record<string, string> = { 'x-api-key': key }) =>
      t!.app.inject({ method: 'PATCH', url: `/vendors/v1/webhooks/${id}`, headers, payload: body });
    const get = (id: string) =>
      t!.app.inject({ method: 'GET', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': key } });
    const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://vendor.example.com/in' };
    const errorOf = (res: { statusCode: number; json<T>(): T }) => ({
      status: res.statusCode,
      error: res.json<{ error: string }>().error,
    });

    // Refused on POST: without fifo, and with a path that is not one.
    for (const body of [
      { ...base, ordering_key: ORDERING_KEY },
      { ...base, ordering: 'none', ordering_key: ORDERING_KEY },
    ]) {
      expect(errorOf(await post(body))).toEqual({
        status: 400,
        error: expect.stringContaining('ordering_key needs ordering fifo') as string,
      });
    }
    for (const [bad, problem] of [
      ['metadata.machine_id', 'ordering_key: must start with data'],
      ['data.machine id', 'ordering_key: "machine id" is not a key'],
      ['', 'ordering_key: must be a dotted path'],
      [7, 'ordering_key must be a string'],
    ] as const) {
      expect({ bad, ...errorOf(await post({ ...base, ordering: 'fifo', ordering_key: bad })) }).toEqual({
        bad,
        status: 400,
        error: expect.stringContaining(problem) as string,
      });
    }
    expect((await t.webhooks.list('v-key')).length, 'nothing refused was stored').toBe(0);

    const created = await post({ ...base, ordering: 'fifo', ordering_key: ORDERING_KEY });
    expect(created.statusCode).toBe(201);
    const id = created.json<{ webhook_id: string }>().webhook_id;
    expect((await get(id)).json()).toMatchObject({ ordering: 'fifo', ordering_key: ORDERING_KEY });
    const listed = await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } });
    expect(listed.json<{ webhooks: object[] }>().webhooks).toEqual([
      expect.objectContaining({ webhook_id: id, ordering_key: ORDERING_KEY }),
    ]);
    const match = () => t!.webhooks.matchMany([{ vendorId: 'v-key', eventType: 'EVENT_TYPE_MACHINE_CREATED' }]);
    expect(await match()).toEqual([{ webhookId: id, fifo: true, orderingKey: ORDERING_KEY }]);

    // PATCH: another path, a bad one, none without removing the key, then null.
    expect((await patch(id, { ordering_key: 'data.gpus.0.name' })).json()).toMatchObject({
      ordering_key: 'data.gpus.0.name',
    });
    expect(errorOf(await patch(id, { ordering_key: 'gpus' }))).toEqual({
      status: 400,
      error: expect.stringContaining('ordering_key: must start with data') as string,
    });
    expect(errorOf(await patch(id, { ordering: 'none' }))).toEqual({
      status: 400,
      error: expect.stringContaining(
        'ordering_key needs ordering fifo (set ordering_key null to switch to none)',
      ) as string,
    });
    expect((await get(id)).json()).toMatchObject({ ordering: 'fifo', ordering_key: 'data.gpus.0.name' });
    const removed = await patch(id, { ordering_key: null });
    expect(removed.json()).toMatchObject({ ordering: 'fifo', ordering_key: null });
    expect(await match()).toEqual([{ webhookId: id, fifo: true }]);
    expect(await t.redis.hexists(t.keys.webhooks.orderingKeys, id)).toBe(0);
    expect((await patch(id, { ordering: 'none' })).json()).toMatchObject({ ordering: 'none', ordering_key: null });
    // Both at once: fifo with a key again, then none with the key removed in the same request.
    expect((await patch(id, { ordering: 'fifo', ordering_key: ORDERING_KEY })).json()).toMatchObject({
      ordering: 'fifo',
      ordering_key: ORDERING_KEY,
    });
    expect((await patch(id, { ordering: 'none', ordering_key: null })).statusCode).toBe(200);
    expect(await match()).toEqual([{ webhookId: id, fifo: false }]);

    // Auth and not found.
    expect((await patch(id, { ordering_key: null }, {})).statusCode).toBe(401);
    const reader = await t.keyFor(['machines:read']);
    expect((await patch(id, { ordering_key: null }, { 'x-api-key': reader })).statusCode).toBe(403);
    const other = await t.keyFor(['vendor'], 'v-other');
    expect((await patch(id, { ordering_key: null }, { 'x-api-key': other })).statusCode).toBe(404);

    // A deleted webhook leaves no ordering key behind.
    expect((await patch(id, { ordering: 'fifo', ordering_key: ORDERING_KEY })).statusCode).toBe(200);
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': key } }))
        .statusCode,
    ).toBe(204);
    expect(await t.redis.hlen(t.keys.webhooks.orderingKeys)).toBe(0);

    // Generated from the schemas: the field in the bodies and the resource, with its rule.
    const doc = await servedDocument(t.app);
    const schemaOf = (method: 'post' | 'patch') =>
      JSON.stringify(
        doc.paths[method === 'post' ? '/vendors/v1/webhooks' : '/vendors/v1/webhooks/{webhook_id}']?.[method],
      );
    expect(schemaOf('post')).toContain('"ordering_key"');
    expect(schemaOf('patch')).toContain('"ordering_key"');
    expect(JSON.stringify(doc.components.schemas.Webhook)).toContain('"ordering_key"');
    expect(schemaOf('post')).toContain(`hashed into ${ORDERING_KEY_BUCKETS} lines per webhook`);
  });
});
