import { randomUUID } from 'node:crypto';
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import type { Engine } from '../../src/engine/index.js';
import { redisKeys } from '../../src/store/keys.js';
import { connectRedis } from '../../src/store/redis.js';
import { RedisWebhookChanges, type WebhookChange } from '../../src/store/webhook-changes.js';
import { testApp, testEngine, type TestApp } from '../helpers/app.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const machineEvent = (vendorId: string) => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_CREATED',
  vendor_id: vendorId,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

describe('the webhook change feed', () => {
  let t: TestRedis | undefined;
  const aborts: AbortController[] = [];
  let app: TestApp | undefined;
  let other: Engine | undefined;

  afterEach(async () => {
    for (const abort of aborts.splice(0)) abort.abort();
    await other?.close(0);
    await app?.close();
    await t?.cleanup();
    t = undefined;
    app = undefined;
    other = undefined;
  });

  it('tells every listener of each change, and after a dropped connection resets it once resubscribed', async () => {
    t = testRedis();
    const feed = new RedisWebhookChanges(t.redis, redisKeys(t.prefix));
    const heard: (WebhookChange | 'reset')[] = [];
    const live: boolean[] = [];
    const abort = new AbortController();
    aborts.push(abort);
    await feed.listen({ changed: (c) => heard.push(c), reset: () => heard.push('reset') }, abort.signal, (up) =>
      live.push(up),
    );
    expect(heard).toEqual(['reset']);
    expect(live).toEqual([true]);
    await feed.publish({ webhookId: 'w1', vendorId: 'v1' });
    await waitFor(() => heard.length === 2, 5_000, 'the first change');
    expect(heard[1]).toEqual({ webhookId: 'w1', vendorId: 'v1' });

    // Drop the listener's connection on the server side: it reconnects and resubscribes by itself.
    const clients = (await t.redis.client('LIST')) as string;
    const subscriber = clients
      .split('\n')
      .find((line) => line.includes(`name=hookline-test-${t!.prefix}`) && / sub=1 /.test(line));
    expect(subscriber).toBeDefined();
    await t.redis.client('KILL', 'ID', /id=(\d+)/.exec(subscriber!)![1]!);
    await waitFor(() => live.length === 3, 10_000, 'the feed down and live again');
    expect(live).toEqual([true, false, true]);
    expect(heard.slice(2)).toEqual(['reset', 'reset']);
    await feed.publish({ webhookId: 'w2', vendorId: 'v2' });
    await waitFor(() => heard.length === 5, 5_000, 'a change after the reconnect');
    expect(heard[4]).toEqual({ webhookId: 'w2', vendorId: 'v2' });
  });

  it('leaves nothing on the signal when it cannot subscribe, however often it is tried again (Redis unreachable)', async () => {
    const redis = connectRedis(`redis://127.0.0.1:${await freeLoopbackPort()}`, {
      connectionName: 'hookline-test-unreachable',
      maxRetriesPerRequest: 1,
    });
    redis.on('error', () => undefined);
    const feed = new RedisWebhookChanges(redis, redisKeys('unreachable'));
    const abort = new AbortController();
    aborts.push(abort);
    try {
      for (let attempt = 1; attempt <= 3; attempt++) {
        await expect(feed.listen({ changed: () => undefined, reset: () => undefined }, abort.signal)).rejects.toThrow();
        // Each attempt left its abort listener behind before: Node warns (MaxListenersExceededWarning) past ten.
        expect(getEventListeners(abort.signal, 'abort'), `after attempt ${attempt}`).toHaveLength(0);
      }
    } finally {
      redis.disconnect();
    }
  });

  it('a webhook registered through one API process is matched by another process’s ingest within milliseconds', async () => {
    app = await testApp();
    // A second process of the same installation, its change feed running as `hookline api` runs it.
    other = await testEngine({ ...app.config }, { role: 'api' });
    await other.start();
    await waitFor(
      async () => (await other!.stores.ingestor.ingest([machineEvent('v-feed')], 'http'))[0]!.status === 'accepted',
      5_000,
      'the other engine',
    );
    // Its lookup now knows that v-feed has no webhook for the type, and keeps that answer.
    expect((await other.stores.ingestor.ingest([machineEvent('v-feed')], 'http'))[0]).toMatchObject({ deliveries: 0 });

    const startedMs = Date.now();
    const { id } = await app.register('v-feed', 'http://127.0.0.1:9/in');
    const deliveriesNow = async () =>
      ((await other!.stores.ingestor.ingest([machineEvent('v-feed')], 'http'))[0] as { deliveries: number }).deliveries;
    await waitFor(async () => (await deliveriesNow()) === 1, 1_000, 'the other process to match the new webhook');
    const newMs = Date.now() - startedMs;

    // Deleted through the first process: the other stops matching it as quickly.
    const deletedAtMs = Date.now();
    const key = await app.keyFor(['vendor'], 'v-feed');
    expect(
      (await app.app.inject({ method: 'DELETE', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': key } }))
        .statusCode,
    ).toBe(204);
    await waitFor(async () => (await deliveriesNow()) === 0, 1_000, 'the other process to forget the deleted webhook');
    console.log(
      `webhook change feed: a new webhook matched elsewhere after ${newMs} ms, a deleted one forgotten after ${Date.now() - deletedAtMs} ms`,
    );
  });
});
