import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import type { FinishedOutcome } from '../../src/delivery/attempt.js';
import { RedisHeldDeliveries } from '../../src/store/held-deliveries.js';
import { testApp, testEngine, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { receiverPool, type ReceivedRequest } from '../helpers/receiver.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const WHSEC = `whsec_${Buffer.from('pause-and-resume-secret-32-bytes').toString('base64')}`;
const VENDOR = 'vendor-pause';
/** How long a test watches for deliveries that must not come while the webhook is paused. */
const HOLD_PERIOD_MS = 1_500;

const eventIdOf = (request: ReceivedRequest) => (JSON.parse(request.body) as { event_id: string }).event_id;
const heldBy = (worker: TestWorker) =>
  worker.outcomes.filter((o) => o.kind === 'deferred' && o.reason === 'webhook_paused');
const heldIds = (workers: TestWorker[]) => new Set(workers.flatMap(heldBy).map((o: FinishedOutcome) => o.job.eventId));

describe('a vendor’s pause holds deliveries until it enables the webhook (real Redis, real receivers)', () => {
  let t: TestApp | undefined;
  const workers: TestWorker[] = [];
  const receivers = receiverPool();

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close()));
    await receivers.closeAll();
    await t?.close();
    t = undefined;
  });

  /** Registers the vendor's EVENT_TYPE_MACHINE_CREATED webhook; answers its id and a PATCH through the API. */
  async function registered(app: TestApp, url: string, extra: object = {}) {
    const webhook = await app.register(VENDOR, url, { secret: WHSEC, ...extra });
    const patch = async (body: object) => {
      const res = await app.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhook.id}`,
        headers: { 'x-api-key': webhook.key },
        payload: body,
      });
      expect(res.statusCode, res.body).toBe(200);
    };
    return { ...webhook, patch };
  }

  /** Ingests `n` events, one call each (distinct accept order); answers their ids in that order. */
  async function ingest(app: TestApp, n: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const event = machineEvent(VENDOR);
      expect((await app.ingestor.ingest([event], 'http')).map((r) => r.status)).toEqual(['accepted']);
      ids.push(event.event_id);
    }
    return ids;
  }

  it('the held index: notes jobs with the longest hold’s expiry, forgets holds that ended, reads and removes them', async () => {
    t = await testApp();
    const index = new RedisHeldDeliveries(t.redis, t.keys);
    const key = t.keys.deliveries.held('w-held');
    const now = Date.now();
    await index.add('w-held', [{ jobId: 'd-1', parked: false }], now + 60_000, now);
    expect(await t.redis.pttl(key)).toBeGreaterThan(59_000);
    await index.add('w-held', [{ jobId: 'p-2', parked: true }], now + 120_000, now);
    expect(await t.redis.pttl(key)).toBeGreaterThan(119_000);
    // A shorter hold never shortens the key's life.
    await index.add('w-held', [{ jobId: 'd-3', parked: false }], now + 30_000, now);
    expect(await t.redis.pttl(key)).toBeGreaterThan(119_000);
    expect(await index.read('w-held')).toEqual([
      { jobId: 'd-3', parked: false },
      { jobId: 'd-1', parked: false },
      { jobId: 'p-2', parked: true },
    ]);
    // Written after the first two holds ended: they ran by themselves, so they are forgotten.
    await index.add('w-held', [{ jobId: 'd-4', parked: false }], now + 200_000, now + 60_000);
    expect(await index.read('w-held')).toEqual([
      { jobId: 'p-2', parked: true },
      { jobId: 'd-4', parked: false },
    ]);
    await index.remove('w-held', [{ jobId: 'p-2', parked: true }]);
    expect(await index.read('w-held')).toEqual([{ jobId: 'd-4', parked: false }]);
  });

  it('sends nothing while paused, then sends every held delivery at once on enable: signed, with the attempts it had (batch and retry jobs)', async () => {
    t = await testApp({ retryScheduleMs: [0, 1_000, 60_000] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 500 });
    const webhook = await registered(t, `${receiver.base}/in`);
    workers.push(await startTestWorker(t));
    // One delivery fails its first attempt before the pause: its retry comes due while paused.
    const [retried] = await ingest(t, 1);
    await waitFor(() => receiver.requests.length === 1, 10_000, 'the first attempt');
    await webhook.patch({ enabled: false });
    receiver.script('/in', { status: 200 });
    const accepted = await ingest(t, 3);

    await waitFor(() => heldIds(workers).size === 4, 10_000, 'four deliveries held');
    expect(await quiescent(() => receiver.requests.length, HOLD_PERIOD_MS, 10_000, 'no delivery while paused')).toBe(1);
    const pending = await t.deliveryLog.recent(webhook.id, 10);
    expect(pending.map((d) => [d.status, d.attempts]).sort()).toEqual([
      ['pending', 0],
      ['pending', 0],
      ['pending', 0],
      ['retrying', 1],
    ]);
    // The API shows when the hold ends: the delivery's retry window, counted from its acceptance.
    for (const d of pending) expect(d.nextAttemptAtMs).toBe(d.acceptedAtMs + 61_000);

    const enabledAtMs = Date.now();
    await webhook.patch({ enabled: true });
    await waitFor(() => receiver.requests.length === 5, 10_000, 'the held deliveries after enable');
    const released = receiver.requests.slice(1);
    const releaseMs = Math.max(...released.map((r) => r.atMs)) - enabledAtMs;
    console.log(
      `pause: 4 held deliveries reached the receiver ${releaseMs} ms after the enable (their holds end in about 60 s)`,
    );
    expect(releaseMs).toBeLessThan(5_000);
    expect(new Set(released.map(eventIdOf))).toEqual(new Set([retried, ...accepted]));
    for (const request of released) {
      expect(new StandardWebhook(WHSEC).verify(request.body, request.headers as Record<string, string>)).toBeTruthy();
      expect(request.headers['x-webhook-attempt']).toBe(eventIdOf(request) === retried ? '2' : '1');
    }
    await waitFor(
      async () => (await t!.deliveryLog.recent(webhook.id, 10)).every((d) => d.status === 'delivered'),
      10_000,
      'all recorded delivered',
    );
    const attempts = Object.fromEntries(
      (await t.deliveryLog.recent(webhook.id, 10)).map((d) => [d.eventId, d.attempts]),
    );
    expect(attempts).toEqual({ [retried!]: 2, [accepted[0]!]: 1, [accepted[1]!]: 1, [accepted[2]!]: 1 });
    expect(await t.deliveryLog.deadLetters(webhook.id, 10)).toEqual([]);
  });

  it('keeps held deliveries through a worker restart, and releases them when another process enables the webhook (the CLI’s way)', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    const webhook = await registered(t, `${receiver.base}/in`);
    await webhook.patch({ enabled: false });
    const first = await startTestWorker(t);
    workers.push(first);
    const accepted = await ingest(t, 3);
    await waitFor(() => heldIds([first]).size === 3, 10_000, 'three deliveries held');
    workers.splice(0);
    await first.close();

    workers.push(await startTestWorker(t));
    expect(
      await quiescent(
        () => receiver.requests.length,
        HOLD_PERIOD_MS,
        10_000,
        'nothing sent by the new worker while paused',
      ),
    ).toBe(0);
    // `hookline webhooks enable` runs the registry's update in a process of its own.
    const tools = await testEngine(t.config, { role: 'tools' });
    const enabledAtMs = Date.now();
    try {
      expect((await tools.stores.webhooks.update(VENDOR, webhook.id, { enabled: true })).ok).toBe(true);
    } finally {
      await tools.close(0);
    }
    await waitFor(() => receiver.requests.length === 3, 10_000, 'the held deliveries after enable');
    expect(Math.max(...receiver.requests.map((r) => r.atMs)) - enabledAtMs).toBeLessThan(5_000);
    expect(new Set(receiver.requests.map(eventIdOf))).toEqual(new Set(accepted));
    expect(receiver.requests.map((r) => r.headers['x-webhook-attempt'])).toEqual(['1', '1', '1']);
  });

  it('dead-letters a delivery still paused at the end of its retry window as paused_expired, unsent, replayable after enable', async () => {
    t = await testApp({ retryScheduleMs: [0, 300, 300] });
    const receiver = await receivers.start();
    const webhook = await registered(t, `${receiver.base}/in`);
    await webhook.patch({ enabled: false });
    workers.push(await startTestWorker(t, { sustainedFailureWindowMs: 100 }));
    const [eventId] = await ingest(t, 1);

    const [dead] = await waitFor(async () => {
      const letters = await t!.deliveryLog.deadLetters(webhook.id, 10);
      return letters.length === 1 && letters;
    });
    expect(heldIds(workers)).toEqual(new Set([eventId]));
    const found = await t.deliveryLog.get(webhook.id, dead!.deliveryId);
    expect(found?.attempts).toHaveLength(1);
    const [expired] = found!.attempts;
    expect(expired).toMatchObject({ attempt: 1, outcome: 'paused_expired', durationMs: 0 });
    expect(expired!.sent).toBeUndefined();
    // Held to the end of its window (0 + 300 + 300 ms after acceptance), not dead-lettered on arrival.
    expect(expired!.atMs - dead!.acceptedAtMs).toBeGreaterThanOrEqual(600);
    expect(receiver.requests).toHaveLength(0);
    // Never sent, so no failure run: the webhook stays paused, not disabled for failing.
    expect(await t.redis.exists(t.keys.deliveries.failingSince(webhook.id))).toBe(0);
    expect((await t.webhooks.getById(webhook.id))?.disabled?.reason).toBe('paused');

    await webhook.patch({ enabled: true });
    const replay = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhook.id}/dead-letters/${dead!.deliveryId}/replay`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(replay.statusCode).toBe(202);
    await waitFor(() => receiver.requests.length === 1, 10_000, 'the replay');
    expect(eventIdOf(receiver.requests[0]!)).toBe(eventId);
  });

  it('an enable stored without its release (its process died in between) is caught by the next hold’s second look, past a cached copy', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    const webhook = await registered(t, `${receiver.base}/in`);
    await webhook.patch({ enabled: false });
    // The worker trusts its copy of the webhook for a minute: it still says paused after the enable below.
    const worker = await startTestWorker(t, { webhookCacheTtlMs: 60_000 });
    workers.push(worker);
    const [first] = await ingest(t, 1);
    await waitFor(() => heldBy(worker).length === 1, 10_000, 'the first delivery held');
    // The hold is in place once its batch has finished: the park queued, the hold noted and given its
    // second look at the webhook. A write before that look would be caught by the look itself.
    await waitFor(
      async () => {
        const counts = await t!.queues.counts();
        return counts.waiting === 0 && counts.active === 0 && counts.delayed === 1;
      },
      10_000,
      'the first delivery’s batch finished, its park delayed',
    );
    // The enable's write alone: no change published, no held delivery released.
    const {
      disabledReason: _reason,
      disabledAtMs: _atMs,
      ...enabled
    } = JSON.parse((await t.redis.hget(t.keys.webhooks.byId, webhook.id))!) as Record<string, unknown>;
    await t.redis.hset(t.keys.webhooks.byId, webhook.id, JSON.stringify(enabled));
    expect(
      await quiescent(() => receiver.requests.length, HOLD_PERIOD_MS, 10_000, 'nothing released by the bare write'),
    ).toBe(0);

    const [second] = await ingest(t, 1);
    await waitFor(() => receiver.requests.length === 2, 10_000, 'both deliveries');
    expect(new Set(receiver.requests.map(eventIdOf))).toEqual(new Set([first, second]));
  });

  it('drops a deleted webhook’s held deliveries at once, not when their holds end', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    const webhook = await registered(t, `${receiver.base}/in`);
    await webhook.patch({ enabled: false });
    const worker = await startTestWorker(t);
    workers.push(worker);
    await ingest(t, 2);
    await waitFor(() => heldBy(worker).length === 2, 10_000, 'two deliveries held');
    const deleted = await t.app.inject({
      method: 'DELETE',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
    });
    expect(deleted.statusCode).toBe(204);
    await waitFor(() => worker.outcomes.filter((o) => o.kind === 'dropped').length === 2, 10_000, 'two dropped');
    expect(receiver.requests).toHaveLength(0);
  });

  it('keeps today’s rule for a webhook the engine disabled (410 Gone): its deliveries are dead-lettered at once, unsent', async () => {
    t = await testApp({ retryScheduleMs: [0, 60_000] });
    const receiver = await receivers.start();
    receiver.script('/in', { status: 410 });
    const webhook = await registered(t, `${receiver.base}/in`);
    const worker = await startTestWorker(t);
    workers.push(worker);
    await ingest(t, 1);
    await waitFor(
      async () => (await t!.webhooks.getById(webhook.id))?.disabled?.reason === 'gone',
      10_000,
      'disabled by the 410',
    );
    await ingest(t, 2);
    await waitFor(
      () => worker.outcomes.filter((o) => o.kind === 'attempted' && o.outcome === 'webhook_disabled').length === 2,
      10_000,
      'two dead letters, unsent',
    );
    expect(heldBy(worker)).toEqual([]);
    expect(receiver.requests).toHaveLength(1);
  });
});
