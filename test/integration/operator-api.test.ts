import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { capturedLogs } from '../helpers/logs.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { receiverPool, type TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

interface WebhookStatusBody {
  webhook_id: string;
  vendor_id: string;
  state: string;
  needs_attention: boolean;
  dead_letters: number;
  failing_since: string | null;
  last_outcome: string | null;
  last_status_code: number | null;
  disabled_reason: string | null;
  circuit: { state: string; reason: string; endpoint: string } | null;
}

interface TaskBody {
  task_id: string;
  status: string;
  fail_reason: string | null;
  progress?: { total: number; done: number; queued?: number; delivered?: number; failed?: number; pending?: number };
}

describe('the operator API: webhooks across vendors, dead letters, actions (real Redis, real receivers)', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  const receivers = receiverPool();
  const logs = capturedLogs();
  const logLines = logs.lines;
  const logger = logs.logger;

  afterEach(async () => {
    await worker?.close();
    worker = undefined;
    await receivers.closeAll();
    await t?.close();
    t = undefined;
    logs.clear();
  });

  /** Two vendors: `ok` delivers, `bad` answers 500 until told otherwise; every `bad` delivery dead-letters. */
  async function twoVendors(options: { breaker?: { failureThreshold: number; openMs: number } } = {}) {
    t = await testApp({ retryScheduleMs: [0, 100], logger: logger() });
    // Separate receivers: separate endpoints, so the healthy one's answers do not keep the other's circuit closed.
    const healthy = await receivers.start();
    const receiver: TestReceiver = await receivers.start();
    receiver.script('/bad', { status: 500 });
    const ok = await t.webhooks.create('vendor-ok', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${healthy.base}/ok`,
    });
    const bad = await t.webhooks.create('vendor-bad', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${receiver.base}/bad`,
    });
    if (!ok.ok || !bad.ok) throw new Error('webhooks not created');
    // Unless a test wants one, no circuit opens: the failing webhook stays "failing".
    const breaker = options.breaker ?? { failureThreshold: 1_000, openMs: 1_000 };
    worker = await startTestWorker(t, {
      sustainedFailureWindowMs: 24 * 3_600_000,
      breaker: { ...breaker, failureRate: 1, minAttempts: 1_000 },
    });
    await t.ingestor.ingest(
      [
        ...Array.from({ length: 3 }, () => machineEvent('vendor-ok')),
        ...Array.from({ length: 4 }, () => machineEvent('vendor-bad')),
      ],
      'http',
    );
    const admin = await t.keyFor(['admin']);
    return { receiver, okId: ok.webhook.id, badId: bad.webhook.id, admin };
  }

  const get = async <T>(url: string, key: string) => {
    const res = await t!.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } });
    return { status: res.statusCode, body: res.json<T>() };
  };
  const post = async <T>(url: string, key: string) => {
    const res = await t!.app.inject({ method: 'POST', url, headers: { 'x-api-key': key } });
    return { status: res.statusCode, body: res.json<T>() };
  };

  it('lists every vendor’s webhooks with their state, failing first, filtered by vendor, state and attention', async () => {
    const { okId, badId, admin } = await twoVendors();
    await waitFor(
      async () => (await t!.deliveryLog.health([badId]))[0]?.deadLetters === 4,
      15_000,
      'four dead letters',
    );
    await queuesDrained(t!.queues);

    const all = await get<{ total: number; webhooks: WebhookStatusBody[] }>('/admin/v1/webhooks', admin);
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(2);
    expect(all.body.webhooks.map((w) => w.webhook_id)).toEqual([badId, okId]);
    expect(all.body.webhooks[0]).toMatchObject({
      vendor_id: 'vendor-bad',
      state: 'failing',
      needs_attention: true,
      dead_letters: 4,
      last_outcome: 'http_5xx',
      last_status_code: 500,
      disabled_reason: null,
      circuit: null,
    });
    expect(all.body.webhooks[0]!.failing_since).toMatch(/^\d{4}-\d{2}-\d{2}T/);
    expect(all.body.webhooks[1]).toMatchObject({
      vendor_id: 'vendor-ok',
      state: 'healthy',
      needs_attention: false,
      dead_letters: 0,
      last_outcome: 'delivered',
    });
    // The secret never appears in an operator view.
    expect(JSON.stringify(all.body)).not.toMatch(/secret/);

    const failing = await get<{ webhooks: WebhookStatusBody[] }>('/admin/v1/webhooks?needs_attention=true', admin);
    expect(failing.body.webhooks.map((w) => w.webhook_id)).toEqual([badId]);
    expect(
      (await get<{ webhooks: WebhookStatusBody[] }>('/admin/v1/webhooks?vendor_id=vendor-ok', admin)).body.webhooks.map(
        (w) => w.webhook_id,
      ),
    ).toEqual([okId]);
    expect(
      (
        await get<{ webhooks: WebhookStatusBody[] }>('/admin/v1/webhooks?state=healthy,paused', admin)
      ).body.webhooks.map((w) => w.webhook_id),
    ).toEqual([okId]);
    const badState = await get<{ error: string }>('/admin/v1/webhooks?state=broken', admin);
    expect(badState.status).toBe(400);
    expect(badState.body.error).toContain('state must be one or more');

    // Dead letters across webhooks: whose each is, newest first.
    const dead = await get<{
      dead_letters: { webhook_id: string; vendor_id: string; status: string; last_status_code: number }[];
    }>('/admin/v1/dead-letters', admin);
    expect(dead.body.dead_letters).toHaveLength(4);
    expect(
      dead.body.dead_letters.every(
        (d) =>
          d.webhook_id === badId && d.vendor_id === 'vendor-bad' && d.status === 'dead' && d.last_status_code === 500,
      ),
    ).toBe(true);
    expect(
      (await get<{ dead_letters: unknown[] }>('/admin/v1/dead-letters?vendor_id=vendor-ok', admin)).body.dead_letters,
    ).toEqual([]);
    expect(
      (await get<{ dead_letters: unknown[] }>(`/admin/v1/dead-letters?webhook_id=${badId}&limit=2`, admin)).body
        .dead_letters,
    ).toHaveLength(2);
    expect((await get(`/admin/v1/dead-letters?webhook_id=${randomUUID()}`, admin)).status).toBe(404);
    expect((await get('/admin/v1/dead-letters?webhook_id=nope', admin)).status).toBe(400);

    // A vendor key sees none of it.
    const vendorKey = await t!.keyFor(['vendor'], 'vendor-bad');
    expect((await get('/admin/v1/webhooks', vendorKey)).status).toBe(403);
  });

  it('enables a disabled webhook of any vendor and replays its dead letters; both logged with the key; the task ends on outcomes', async () => {
    const { receiver, badId, admin } = await twoVendors();
    await waitFor(
      async () => (await t!.deliveryLog.health([badId]))[0]?.deadLetters === 4,
      15_000,
      'four dead letters',
    );
    await t!.webhooks.disable(badId, 'failing');
    const disabled = await get<WebhookStatusBody>(`/admin/v1/webhooks/${badId}`, admin);
    expect(disabled.body).toMatchObject({ state: 'disabled', disabled_reason: 'failing', needs_attention: true });

    const enabled = await post<WebhookStatusBody>(`/admin/v1/webhooks/${badId}/enable`, admin);
    expect(enabled.status).toBe(200);
    expect(enabled.body).toMatchObject({
      state: 'healthy',
      disabled_reason: null,
      failing_since: null,
      dead_letters: 4,
    });

    // The receiver is fixed; the operator replays everything.
    receiver.script('/bad', { status: 200 });
    const replay = await post<{ task_id: string }>(`/admin/v1/webhooks/${badId}/dead-letters/replay`, admin);
    expect(replay.status).toBe(202);
    const taskId = replay.body.task_id;
    // The vendor reads its own task; another vendor does not learn it exists.
    const vendorKey = await t!.keyFor(['vendor'], 'vendor-bad');
    const otherVendor = await t!.keyFor(['vendor'], 'vendor-ok');
    expect((await get(`/rental/v1/tasks/${taskId}`, otherVendor)).status).toBe(404);
    const done = await waitFor(
      async () => {
        const res = await get<TaskBody>(`/rental/v1/tasks/${taskId}`, vendorKey);
        return res.body.status === 'success' ? res.body : undefined;
      },
      15_000,
      'the replay task to end',
    );
    expect(done).toEqual({
      task_id: taskId,
      status: 'success',
      fail_reason: null,
      progress: { total: 4, done: 4, queued: 4, delivered: 4, failed: 0, pending: 0 },
    });
    expect(
      receiver.at('/bad').filter((r) => r.headers['x-webhook-attempt'] !== undefined).length,
    ).toBeGreaterThanOrEqual(4 * 2 + 4);

    const actions = logLines.filter((l) => String(l.event).startsWith('operator.'));
    expect(actions.map((l) => l.event)).toEqual(['operator.webhook_enabled', 'operator.dead_letters_replayed']);
    expect(actions[0]).toMatchObject({
      webhookId: badId,
      vendorId: 'vendor-bad',
      wasDisabled: 'failing',
      keyName: 'test admin',
    });
    expect(actions[1]).toMatchObject({ webhookId: badId, taskId });
    expect(JSON.stringify(actions)).not.toContain(admin);
  });

  it('a replay task whose deliveries fail again ends failed, saying how many; one dead letter replays on its own', async () => {
    const { badId, admin } = await twoVendors();
    await waitFor(
      async () => (await t!.deliveryLog.health([badId]))[0]?.deadLetters === 4,
      15_000,
      'four dead letters',
    );
    const [first] = (
      await get<{ dead_letters: { delivery_id: string }[] }>(
        `/admin/v1/dead-letters?webhook_id=${badId}&limit=1`,
        admin,
      )
    ).body.dead_letters;
    const one = await post<{ delivery_id: string; replay_of: string }>(
      `/admin/v1/webhooks/${badId}/dead-letters/${first!.delivery_id}/replay`,
      admin,
    );
    expect(one.status).toBe(202);
    expect(one.body.replay_of).toBe(first!.delivery_id);
    expect((await post(`/admin/v1/webhooks/${badId}/dead-letters/${first!.delivery_id}/replay`, admin)).status).toBe(
      409,
    );
    await waitFor(
      async () => (await t!.deliveryLog.health([badId]))[0]?.deadLetters === 4,
      15_000,
      'the replay dead again',
    );

    const { task_id: taskId } = (
      await post<{ task_id: string }>(`/admin/v1/webhooks/${badId}/dead-letters/replay`, admin)
    ).body;
    const tasksKey = await t!.keyFor(['tasks:read']);
    const ended = await waitFor(
      async () => {
        const res = await get<TaskBody>(`/rental/v1/tasks/${taskId}`, tasksKey);
        return res.body.status === 'failed' ? res.body : undefined;
      },
      15_000,
      'the replay task to fail',
    );
    expect(ended.progress).toEqual({ total: 4, done: 4, queued: 4, delivered: 0, failed: 4, pending: 0 });
    expect(ended.fail_reason).toBe(
      "4 of 4 replayed deliveries failed again (see the webhook's dead letters); 0 delivered",
    );
  });

  it('shows an open circuit, with its endpoint and reason, while a worker holds deliveries back', async () => {
    const { badId, admin, receiver } = await twoVendors({ breaker: { failureThreshold: 2, openMs: 60_000 } });
    const status = await waitFor(
      async () => {
        const res = await get<WebhookStatusBody>(`/admin/v1/webhooks/${badId}`, admin);
        return res.body.state === 'circuit_open' ? res.body : undefined;
      },
      15_000,
      'the circuit to show',
    );
    expect(status.circuit).toMatchObject({ state: 'open', reason: 'consecutive_failures', endpoint: receiver.base });
    expect(status.needs_attention).toBe(true);
  });
});

describe('replay task progress before any attempt', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('counts replays that wait for their first attempt as pending, not failed, and keeps the task in progress', async () => {
    t = await testApp();
    const created = await t.webhooks.create('v-wait', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
    });
    if (!created.ok) throw new Error('webhook not created');
    const webhookId = created.webhook.id;
    for (let i = 0; i < 3; i += 1) {
      const job = {
        deliveryId: randomUUID(),
        eventId: randomUUID(),
        eventType: 'EVENT_TYPE_MACHINE_CREATED' as const,
        vendorId: 'v-wait',
        webhookId,
        body: '{}',
        acceptedAtMs: Date.now(),
      };
      await t.deliveryLog.recordAttempt({
        job,
        attempt: { attempt: 1, atMs: Date.now(), outcome: 'http_5xx', statusCode: 500, durationMs: 1 },
        status: 'dead',
      });
    }
    // No worker runs: the replays are queued and have no record yet.
    const taskId = await t.replayer.createTask('v-wait', webhookId);
    expect(await t.replayer.runReplayAll(taskId, webhookId)).toEqual({ replayed: 3, skipped: 0 });
    for (let read = 0; read < 2; read += 1) {
      expect(await t.replayTasks.view(taskId)).toEqual({
        vendorId: 'v-wait',
        task: {
          task_id: taskId,
          status: 'in_progress',
          fail_reason: null,
          progress: { total: 3, done: 3, queued: 3, delivered: 0, failed: 0, pending: 3 },
        },
      });
    }
  });
});

describe('the deliveries list: filters, time range and cursor', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('pages through a webhook’s deliveries newest first with status, event_type and time filters', async () => {
    t = await testApp();
    const created = await t.webhooks.create('v-list', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
    });
    if (!created.ok) throw new Error('webhook not created');
    const webhookId = created.webhook.id;
    const baseMs = Date.parse('2026-11-01T00:00:00Z');
    // 30 deliveries a minute apart; every third dead, the rest delivered; the even ones a test event type.
    const jobs = Array.from({ length: 30 }, (_, i) => ({
      deliveryId: randomUUID(),
      eventId: randomUUID(),
      eventType: (i % 2 === 0
        ? 'EVENT_TYPE_MACHINE_CREATED'
        : 'EVENT_TYPE_MACHINE_UPDATED') as 'EVENT_TYPE_MACHINE_CREATED',
      vendorId: 'v-list',
      webhookId,
      body: '{}',
      acceptedAtMs: baseMs + i * 60_000,
    }));
    for (const [i, job] of jobs.entries()) {
      const dead = i % 3 === 0;
      await t.deliveryLog.recordAttempt({
        job,
        attempt: {
          attempt: 1,
          atMs: job.acceptedAtMs,
          outcome: dead ? 'http_5xx' : 'delivered',
          statusCode: dead ? 500 : 200,
          durationMs: 1,
        },
        status: dead ? 'dead' : 'delivered',
      });
    }
    const key = await t.keyFor(['vendor'], 'v-list');
    const list = async (query: string) => {
      const res = await t!.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${webhookId}/deliveries?${query}`,
        headers: { 'x-api-key': key },
      });
      return {
        status: res.statusCode,
        body: res.json<{
          deliveries: { delivery_id: string; status: string; event_type: string }[];
          next_cursor: string | null;
        }>(),
      };
    };

    // Every page of 7, following next_cursor, gives all 30 once, newest first.
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page += 1) {
      const res = await list(`limit=7${cursor === null ? '' : `&cursor=${cursor}`}`);
      expect(res.status).toBe(200);
      seen.push(...res.body.deliveries.map((d) => d.delivery_id));
      cursor = res.body.next_cursor;
      if (cursor === null) break;
    }
    expect(seen).toEqual(jobs.map((j) => j.deliveryId).reverse());

    const dead = await list('status=dead&limit=100');
    expect(dead.body.deliveries.map((d) => d.delivery_id)).toEqual(
      jobs
        .filter((_, i) => i % 3 === 0)
        .map((j) => j.deliveryId)
        .reverse(),
    );
    expect(dead.body.next_cursor).toBeNull();
    const deadCreated = await list('status=dead&event_type=EVENT_TYPE_MACHINE_CREATED&limit=2');
    expect(deadCreated.body.deliveries.map((d) => d.delivery_id)).toEqual([jobs[24]!.deliveryId, jobs[18]!.deliveryId]);
    const more = await list(
      `status=dead&event_type=EVENT_TYPE_MACHINE_CREATED&limit=2&cursor=${deadCreated.body.next_cursor}`,
    );
    expect(more.body.deliveries.map((d) => d.delivery_id)).toEqual([jobs[12]!.deliveryId, jobs[6]!.deliveryId]);

    // Accepted between minute 10 and minute 12, both ends included.
    const window = await list(`since=2026-11-01T00:10:00Z&until=2026-11-01T00:12:00.000Z`);
    expect(window.body.deliveries.map((d) => d.delivery_id)).toEqual([
      jobs[12]!.deliveryId,
      jobs[11]!.deliveryId,
      jobs[10]!.deliveryId,
    ]);

    for (const [query, message] of [
      ['since=yesterday', 'since must be an ISO 8601 time'],
      ['until=2026-11-01', 'until must be an ISO 8601 time'],
      ['since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z', 'since is after until'],
      ['cursor=bm9wZQ', 'cursor is not a next_cursor'],
      ['status=gone', 'status must be one of'],
    ] as const) {
      const res = await list(query);
      expect([query, res.status]).toEqual([query, 400]);
      expect(JSON.stringify(res.body)).toContain(message);
    }
  });
});
