import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { capturedLogs } from '../helpers/logs.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor, deliveryLogCaughtUp } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-feed';
const logs = capturedLogs();

type Feed = {
  events: { cursor: string; event_id: string; delivery_id: string; status: string; payload: { event_id: string } }[];
  next_cursor: string | null;
  has_more: boolean;
};

describe('the event feed and range replays (real Redis, a real receiver, a worker)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let webhook: { id: string; key: string };
  const accepted: string[] = [];

  beforeAll(async () => {
    t = await testApp({ retryScheduleMs: [0, 50], logger: logs.logger() });
    receiver = new TestReceiver();
    await receiver.start();
    worker = await startTestWorker(t);
    webhook = await t.register(VENDOR, `${receiver.base}/hook`);
    // Three batches, so the log's order is the accept order across ingest calls.
    for (let batch = 0; batch < 3; batch += 1) {
      const events = Array.from({ length: 9 }, () => machineEvent(VENDOR));
      accepted.push(...events.map((e) => e.event_id));
      await t.ingestor.ingest(events, 'http');
    }
    await waitFor(() => receiver.requests.length >= accepted.length, 15_000, 'every event delivered');
    await queuesDrained(t.queues, 10_000);
    await deliveryLogCaughtUp(t);
  });
  afterAll(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  const api = (method: 'GET' | 'POST', url: string, payload?: object, key = webhook.key) =>
    t.app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload }) });

  async function pageAll(app: TestApp, limit: number): Promise<Feed['events']> {
    const seen: Feed['events'] = [];
    let after: string | null = null;
    for (let pages = 0; pages < 100; pages += 1) {
      const res: { statusCode: number; json<T>(): T } = await app.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhook.id}/events?limit=${limit}${after === null ? '' : `&after=${after}`}`,
        headers: { 'x-api-key': webhook.key },
      });
      expect(res.statusCode).toBe(200);
      const page: Feed = res.json<Feed>();
      seen.push(...page.events);
      after = page.next_cursor;
      if (!page.has_more) break;
    }
    return seen;
  }

  it('lists every matched event in accept order with its status and body, paged by cursor', async () => {
    const events = await pageAll(t, 10);
    expect(events.map((e) => e.event_id)).toEqual(accepted);
    expect(new Set(events.map((e) => e.status))).toEqual(new Set(['delivered']));
    expect(events.every((e) => e.payload.event_id === e.event_id)).toBe(true);
    // Cursors only grow.
    const cursors = events.map((e) => e.cursor.split('-').map(Number) as [number, number]);
    for (let i = 1; i < cursors.length; i += 1) {
      const [a, b] = [cursors[i - 1]!, cursors[i]!];
      expect(b[0] > a[0] || (b[0] === a[0] && b[1] > a[1])).toBe(true);
    }
    // At the end: no more, and the cursor to poll with later is the last event's.
    const tail = (
      await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?after=${events.at(-1)!.cursor}`)
    ).json<Feed>();
    expect(tail).toEqual({ events: [], next_cursor: events.at(-1)!.cursor, has_more: false });
  });

  it('appends each delivery once, however often ingest writes it again (a batch re-run after a crash)', async () => {
    const first = (await pageAll(t, 200))[0]!;
    await t.eventLog.append([
      {
        webhookId: webhook.id,
        deliveryId: first.delivery_id,
        eventId: first.event_id,
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        body: '{}',
      },
    ]);
    const again = await pageAll(t, 200);
    expect(again).toHaveLength(accepted.length);
    expect(again[0]!.payload.event_id).toBe(first.event_id);
  });

  it('answers 400 for a bad cursor or limit and 404 for another vendor’s webhook', async () => {
    expect((await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?after=abc`)).statusCode).toBe(400);
    // Digits, but past what a stream id holds (Redis would refuse it): 400, not 500.
    expect(
      (await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?after=1-99999999999999999999`)).statusCode,
    ).toBe(400);
    expect(
      (await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?after=18446744073709551615-0`)).statusCode,
    ).toBe(200);
    expect((await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?limit=0`)).statusCode).toBe(400);
    expect((await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?limit=201`)).statusCode).toBe(400);
    const other = await t.keyFor(['vendor'], 'someone-else');
    expect((await api('GET', `/vendors/v1/webhooks/${webhook.id}/events`, undefined, other)).statusCode).toBe(404);
    expect(
      (await api('POST', `/vendors/v1/webhooks/${webhook.id}/replay`, { since: new Date(0).toISOString() }, other))
        .statusCode,
    ).toBe(404);
  });

  it('replays a time range: a dry run counts, the replay sends each again linked to its first, as a task', async () => {
    const events = await pageAll(t, 200);
    // The second batch's window: from its first event's accept time to its last's.
    const since = new Date(Number(events[9]!.cursor.split('-')[0])).toISOString();
    const until = new Date(Number(events[17]!.cursor.split('-')[0])).toISOString();
    const inRange = events.filter((e) => {
      const ms = Number(e.cursor.split('-')[0]);
      return ms >= Date.parse(since) && ms <= Date.parse(until);
    });

    const dry = await api('POST', `/vendors/v1/webhooks/${webhook.id}/replay`, { since, until, dry_run: true });
    expect(dry.statusCode).toBe(200);
    expect(dry.json()).toEqual({ count: inRange.length, capped: false });
    expect(
      (
        await api('POST', `/vendors/v1/webhooks/${webhook.id}/replay`, {
          since,
          until,
          dry_run: true,
          statuses: ['dead'],
        })
      ).json(),
    ).toEqual({ count: 0, capped: false });

    const sentBefore = receiver.requests.length;
    const started = await api('POST', `/vendors/v1/webhooks/${webhook.id}/replay`, { since, until });
    expect(started.statusCode).toBe(202);
    const { task_id: taskId, count } = started.json<{ task_id: string; count: number }>();
    expect(count).toBe(inRange.length);
    let task: { status: string; progress?: Record<string, unknown> } | undefined;
    await waitFor(
      async () => {
        task = (await api('GET', `/rental/v1/tasks/${taskId}`)).json();
        return task!.status === 'success';
      },
      15_000,
      'the range replay to end',
    );
    expect(task!.progress).toMatchObject({ total: count, done: count, queued: count, delivered: count, failed: 0 });
    await queuesDrained(t.queues, 10_000);
    const replayed = receiver.requests.slice(sentBefore).map((r) => JSON.parse(r.body) as { event_id: string });
    expect(replayed.map((b) => b.event_id).sort()).toEqual(inRange.map((e) => e.event_id).sort());
    // Each replay is a delivery of its own, linked to the event's first.
    const deliveries = (await api('GET', `/vendors/v1/webhooks/${webhook.id}/deliveries?limit=100`)).json<{
      deliveries: { replay_of: string | null }[];
    }>().deliveries;
    const replayOf = new Set(deliveries.flatMap((d) => (d.replay_of === null ? [] : [d.replay_of])));
    for (const e of inRange) expect(replayOf.has(e.delivery_id)).toBe(true);
  });

  it('refuses bad replay bodies with a 400 naming the field', async () => {
    const url = `/vendors/v1/webhooks/${webhook.id}/replay`;
    const cases: [object, string][] = [
      [{}, 'since'],
      [{ since: 'yesterday' }, 'since'],
      [{ since: '2026-01-02T00:00:00Z', until: '2026-01-01T00:00:00Z' }, 'since is after until'],
      [{ since: '2026-01-01T00:00:00Z', statuses: ['lost'] }, 'statuses'],
      [{ since: '2026-01-01T00:00:00Z', rate_per_second: 0 }, 'rate_per_second'],
      [{ since: '2026-01-01T00:00:00Z', extra: 1 }, 'extra'],
    ];
    for (const [body, word] of cases) {
      const res = await api('POST', url, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(word);
    }
  });

  it('an operator replays a vendor’s range (logged with the key), and a paced replay is cancelled between pages', async () => {
    const admin = await t.keyFor(['admin']);
    const since = new Date(0).toISOString();
    const dry = await api('POST', '/admin/v1/replays', { vendor_id: VENDOR, since, dry_run: true }, admin);
    expect(dry.statusCode).toBe(200);
    expect(dry.json()).toEqual({
      count: accepted.length,
      capped: false,
      webhooks: [{ webhook_id: webhook.id, count: accepted.length, capped: false }],
    });
    expect(
      (await api('POST', '/admin/v1/replays', { vendor_id: VENDOR, since, dry_run: true }, webhook.key)).statusCode,
    ).toBe(403);
    expect(
      (
        await api(
          'POST',
          '/admin/v1/replays',
          { vendor_id: VENDOR, webhook_id: '00000000-0000-4000-8000-000000000000', since },
          admin,
        )
      ).statusCode,
    ).toBe(404);

    // 2 a second: the run is still going when the cancel comes.
    const started = await api('POST', '/admin/v1/replays', { vendor_id: VENDOR, since, rate_per_second: 2 }, admin);
    expect(started.statusCode).toBe(202);
    const [{ task_id: taskId }] = started.json<{ tasks: { task_id: string }[] }>().tasks as [{ task_id: string }];
    const logged = logs.lines.find((line) => line.event === 'operator.replay_started');
    expect(logged).toMatchObject({ vendorId: VENDOR, count: accepted.length, taskIds: [taskId] });
    expect(typeof logged?.keyId).toBe('string');
    await waitFor(
      async () =>
        ((await api('GET', `/rental/v1/tasks/${taskId}`)).json<{ progress?: { queued?: number } }>().progress?.queued ??
          0) >= 2,
      10_000,
      'the first replays queued',
    );
    expect((await api('POST', `/vendors/v1/tasks/${taskId}/cancel`)).statusCode).toBe(202);
    let task: { status: string; fail_reason: string | null; progress: { queued: number } } | undefined;
    await waitFor(
      async () => {
        task = (await api('GET', `/rental/v1/tasks/${taskId}`)).json();
        return task!.status === 'failed';
      },
      15_000,
      'the cancelled replay to end',
    );
    expect(task!.progress.queued).toBeLessThan(accepted.length);
    expect(task!.fail_reason).toMatch(/^cancelled after \d+ of 27 events were replayed/);
  });

  it('keeps the feed across a restart: a second engine on the same data pages on from the cursor the first gave', async () => {
    const first = (await api('GET', `/vendors/v1/webhooks/${webhook.id}/events?limit=5`)).json<Feed>();
    const restarted = await testApp({ prefix: t.prefix, secretKey: t.secretKey });
    try {
      const rest = await restarted.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhook.id}/events?limit=200&after=${first.next_cursor}`,
        headers: { 'x-api-key': webhook.key },
      });
      expect([...first.events, ...rest.json<Feed>().events].map((e) => e.event_id)).toEqual(accepted);
    } finally {
      await restarted.close({ keepData: true });
    }
  });

  it('with HOOKLINE_EVENT_LOG=false ingest keeps no log, and the feed and range replays say so with 409', async () => {
    const off = await testApp({ eventLog: false });
    try {
      const hook = await off.register('vendor-no-log', `${receiver.base}/hook`);
      await off.ingestor.ingest([machineEvent('vendor-no-log')], 'http');
      expect(await off.redis.exists(off.keys.deliveries.log(hook.id), off.keys.deliveries.logBodies(hook.id))).toBe(0);
      const call = (method: 'GET' | 'POST', url: string, payload?: object, key = hook.key) =>
        off.app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload }) });
      const since = '2026-01-01T00:00:00Z';
      const answers = [
        await call('GET', `/vendors/v1/webhooks/${hook.id}/events`),
        await call('POST', `/vendors/v1/webhooks/${hook.id}/replay`, { since, dry_run: true }),
        await call('POST', '/admin/v1/replays', { vendor_id: 'vendor-no-log', since }, await off.keyFor(['admin'])),
      ];
      for (const answer of answers) {
        expect(answer.statusCode).toBe(409);
        expect(answer.json()).toMatchObject({ code: 'event_log_disabled' });
      }
      // Authentication still comes first.
      expect((await call('GET', `/vendors/v1/webhooks/${hook.id}/events`, undefined, 'hk_wrong')).statusCode).toBe(401);
    } finally {
      await off.close();
    }
  });

  it('takes a webhook’s own retention within the installation’s, shows it, and returns it to the default with null', async () => {
    const url = `/vendors/v1/webhooks/${webhook.id}`;
    const patch = (payload: object) =>
      t.app.inject({ method: 'PATCH', url, headers: { 'x-api-key': webhook.key }, payload });
    const longer = await patch({ retention: '30d' });
    expect(longer.statusCode).toBe(400);
    expect(longer.json<{ error: string }>().error).toContain("at most the installation's retention, 7d");
    // Whole minutes from 1m, for installations that keep payloads only until they are delivered.
    for (const refused of ['0m', '30s', '1.5h', '5 m'])
      expect((await patch({ retention: refused })).json<{ error: string }>().error).toContain('at least 1m');
    expect((await patch({ retention: '1m' })).json()).toMatchObject({ retention: '1m' });
    expect((await patch({ retention: '90m' })).json()).toMatchObject({ retention: '90m' });
    expect((await patch({ retention: '120m' })).json()).toMatchObject({ retention: '2h' });
    expect((await patch({ retention: '36h' })).json()).toMatchObject({ retention: '36h' });
    expect((await patch({ retention: '2d' })).json()).toMatchObject({ retention: '2d' });
    expect((await patch({ retention: null })).json()).toMatchObject({ retention: null });
  });
});
