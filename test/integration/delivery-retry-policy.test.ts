import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { useDeliveryWorld } from '../helpers/delivery-world.js';
import { machineEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/wait.js';

const VENDOR = 'vendor-retry-policy';

describe('a webhook’s own retry policy: its schedule and max_age (real Redis, real receivers)', () => {
  const start = useDeliveryWorld(VENDOR);
  /** The test's app, worker and receiver on an installation with this retry schedule. */
  const started = (retryScheduleMs: number[]) => start({ retryScheduleMs });

  /** A request to the vendor API with the webhook's key. */
  const call = (app: TestApp, key: string, method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object) =>
    app.app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload }) });

  async function ingestOne(app: TestApp): Promise<string> {
    const event = machineEvent(VENDOR);
    expect((await app.ingestor.ingest([event], 'http')).map((r) => r.status)).toEqual(['accepted']);
    return event.event_id;
  }

  async function deadLetterOf(app: TestApp, webhookId: string) {
    const [dead] = await waitFor(
      async () => {
        const letters = await app.deliveryLog.deadLetters(webhookId, 10);
        return letters.length === 1 && letters;
      },
      20_000,
      'the dead letter',
    );
    const found = await app.deliveryLog.get(webhookId, dead!.deliveryId);
    return { dead: dead!, attempts: found!.attempts };
  }

  it('is set, shown, replaced as a whole and removed through the API, within the installation’s schedule', async () => {
    // The installation: 2 retries, a window of 0 + 5 s + 300 s.
    const { t } = await started([0, 5_000, 300_000]);
    const webhook = await t.register(VENDOR, 'http://127.0.0.1:9/hook', {
      retry: { schedule: ['1s', '90s'], max_age: '5m' },
    });
    const read = async () =>
      (await call(t, webhook.key, 'GET', `/vendors/v1/webhooks/${webhook.id}`)).json<{ retry: unknown }>().retry;
    expect(await read()).toEqual({ schedule: ['1s', '90s'], max_age: '5m' });

    const patched = await call(t, webhook.key, 'PATCH', `/vendors/v1/webhooks/${webhook.id}`, {
      retry: { max_age: '1m' },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json<{ retry: unknown }>().retry).toEqual({ schedule: null, max_age: '1m' });
    expect(
      (await call(t, webhook.key, 'PATCH', `/vendors/v1/webhooks/${webhook.id}`, { retry: null })).statusCode,
    ).toBe(200);
    expect(await read()).toBeNull();

    const refused: [object, string][] = [
      [{ schedule: ['1s', '1s', '1s'] }, "at most the installation's 2 retries"],
      [{ schedule: ['1s', '2h'] }, "add up to at most the installation's retry window, 5m 5s"],
      [{ max_age: '6m' }, "max_age must be at most the installation's retry window, 5m 5s"],
      [{ schedule: ['5 s'] }, 'whole number of seconds, minutes, hours or days'],
      [{ schedule: [] }, 'at least one retry'],
      [{ max_age: '0s' }, 'whole number of seconds'],
      [{}, 'retry must set schedule, max_age or both'],
      [{ tries: 3 }, 'unknown field "retry.tries"'],
    ];
    for (const [retry, message] of refused) {
      const res = await call(t, webhook.key, 'PATCH', `/vendors/v1/webhooks/${webhook.id}`, { retry });
      expect(res.statusCode, JSON.stringify(retry)).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(message);
    }
    // Nothing refused was stored.
    expect(await read()).toBeNull();
  });

  it('retries on the webhook’s own schedule, not the installation’s, and dead-letters after its last retry', async () => {
    // The installation waits a minute between attempts; the webhook asks for a second.
    const { t, receiver } = await started([0, 60_000, 60_000, 60_000]);
    receiver.script('/in', { status: 500 });
    const webhook = await t.register(VENDOR, `${receiver.base}/in`, { retry: { schedule: ['1s', '1s'] } });
    const eventId = await ingestOne(t);

    const { attempts } = await deadLetterOf(t, webhook.id);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'http_5xx', 'http_5xx']);
    expect(receiver.requests.map((r) => r.headers['x-webhook-attempt'])).toEqual(['1', '2', '3']);
    expect(new Set(receiver.requests.map((r) => (JSON.parse(r.body) as { event_id: string }).event_id))).toEqual(
      new Set([eventId]),
    );
    // One second apart, ±20 % (and the time a run takes to start), not a minute.
    for (let i = 1; i < receiver.requests.length; i++) {
      const gapMs = receiver.requests[i]!.atMs - receiver.requests[i - 1]!.atMs;
      expect(gapMs).toBeGreaterThanOrEqual(750);
      expect(gapMs).toBeLessThan(10_000);
    }
  });

  it('a policy set while a delivery waits applies from its next attempt', async () => {
    const { t, receiver } = await started([0, 1_000, 60_000]);
    receiver.script('/in', { status: 500 });
    const webhook = await t.register(VENDOR, `${receiver.base}/in`);
    await ingestOne(t);
    await waitFor(() => receiver.requests.length === 1, 10_000, 'the first attempt');
    // Its retry is due in a second, the one after in a minute: the new schedule makes that a second.
    const patched = await call(t, webhook.key, 'PATCH', `/vendors/v1/webhooks/${webhook.id}`, {
      retry: { schedule: ['1s', '1s'] },
    });
    expect(patched.statusCode, patched.body).toBe(200);

    const { attempts } = await deadLetterOf(t, webhook.id);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'http_5xx', 'http_5xx']);
    expect(attempts[2]!.atMs - attempts[1]!.atMs).toBeLessThan(10_000);
  });

  it('dead-letters a failing delivery as max_age_expired when its max_age passes, unsent, instead of waiting for a retry due later; a replay counts afresh', async () => {
    // After a quick retry, the installation's next one is a minute away: past the webhook's max_age of 2 s.
    const { t, receiver } = await started([0, 500, 60_000]);
    receiver.script('/in', { status: 500 });
    const webhook = await t.register(VENDOR, `${receiver.base}/in`, { retry: { max_age: '2s' } });
    await ingestOne(t);

    const { dead, attempts } = await deadLetterOf(t, webhook.id);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'http_5xx', 'max_age_expired']);
    const expired = attempts[2]!;
    expect(expired.sent).toBeUndefined();
    expect(expired.durationMs).toBe(0);
    expect(expired.error).toContain("older than the webhook's max_age (2s after acceptance)");
    // At its max_age, not at the retry a minute later.
    expect(expired.atMs - dead.acceptedAtMs).toBeGreaterThanOrEqual(2_000);
    expect(expired.atMs - dead.acceptedAtMs).toBeLessThan(15_000);
    expect(receiver.requests).toHaveLength(2);

    // The API shows why.
    const listed = await call(t, webhook.key, 'GET', `/vendors/v1/webhooks/${webhook.id}/deliveries?status=dead`);
    expect(listed.statusCode, listed.body).toBe(200);
    expect(listed.json<{ deliveries: { last_outcome: string }[] }>().deliveries.map((d) => d.last_outcome)).toEqual([
      'max_age_expired',
    ]);

    // A replay is a new delivery: its max_age counts from the replay.
    receiver.script('/in', { status: 200 });
    const replay = await call(
      t,
      webhook.key,
      'POST',
      `/vendors/v1/webhooks/${webhook.id}/dead-letters/${dead.deliveryId}/replay`,
    );
    expect(replay.statusCode, replay.body).toBe(202);
    await waitFor(() => receiver.requests.length === 3, 10_000, 'the replay');
    expect(receiver.requests[2]!.headers['x-webhook-attempt']).toBe('1');
  });

  it('a FIFO line’s failing head is dead-lettered at its max_age and the line goes on, in order', async () => {
    const { t, receiver } = await started([0, 1_500, 60_000]);
    // The head fails until its max_age passes (attempts at 0 and about 1.5 s, dead at 3 s); the two
    // behind it, accepted after its second attempt, wait in line with time to spare, then go.
    receiver.script('/in', { status: 500 }, { status: 500 }, { status: 200 });
    const webhook = await t.register(VENDOR, `${receiver.base}/in`, { ordering: 'fifo', retry: { max_age: '3s' } });
    const head = await ingestOne(t);
    await waitFor(() => receiver.requests.length === 2, 10_000, 'the head’s second attempt');
    const behind = [await ingestOne(t), await ingestOne(t)];

    const { attempts } = await deadLetterOf(t, webhook.id);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'http_5xx', 'max_age_expired']);
    await waitFor(() => receiver.requests.length === 4, 20_000, 'the two behind the head');
    expect(receiver.requests.map((r) => (JSON.parse(r.body) as { event_id: string }).event_id)).toEqual([
      head,
      head,
      ...behind,
    ]);
  });

  it('dead-letters a paused webhook’s delivery at its max_age, not at the end of its retry window', async () => {
    const { t, receiver } = await started([0, 60_000]);
    const webhook = await t.register(VENDOR, `${receiver.base}/in`, { retry: { max_age: '1s' } });
    expect(
      (await call(t, webhook.key, 'PATCH', `/vendors/v1/webhooks/${webhook.id}`, { enabled: false })).statusCode,
    ).toBe(200);
    await ingestOne(t);

    const { dead, attempts } = await deadLetterOf(t, webhook.id);
    expect(attempts.map((a) => a.outcome)).toEqual(['max_age_expired']);
    expect(attempts[0]!.atMs - dead.acceptedAtMs).toBeGreaterThanOrEqual(1_000);
    expect(attempts[0]!.atMs - dead.acceptedAtMs).toBeLessThan(15_000);
    expect(receiver.requests).toHaveLength(0);
  });
});
