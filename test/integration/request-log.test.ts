import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../../src/engine/index.js';
import { createEngine } from '../../src/engine/index.js';
import { createLogger } from '../../src/logger.js';
import { redisKeys } from '../../src/store/keys.js';
import { testConfig } from '../helpers/app.js';
import { testRedis } from '../helpers/redis.js';

type Line = Record<string, unknown> & { level: number; reqId?: string };

/** The admin API's one line per request, for the routes whose line is an audit event or a failure. */
describe('the admin API’s request lines', () => {
  const t = testRedis();
  const chunks: string[] = [];
  let engine: Engine;
  let vendorKey: string;
  let webhookId: string;

  const lines = () =>
    chunks
      .join('')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Line);
  /** The one line of the request just injected (the last request id logged), checking there is only one. */
  const lineOf = (statusCode: number): Line => {
    const all = lines();
    const last = all.at(-1);
    expect(last?.status).toBe(statusCode);
    expect(all.filter((l) => l.reqId === last?.reqId)).toHaveLength(1);
    return last!;
  };
  const call = (method: 'GET' | 'POST', url: string) =>
    engine.api!.inject({ method, url, headers: { 'x-api-key': vendorKey } });

  beforeAll(async () => {
    const sink = new Writable({ write: (chunk: Buffer, _encoding, done) => (chunks.push(chunk.toString()), done()) });
    engine = await createEngine(testConfig({ redisUrl: t.url, redisPrefix: t.prefix, queuePartitions: 2 }), {
      role: 'api',
      logger: createLogger({ level: 'info', format: 'json', fd: 1, destination: sink }),
    });
    vendorKey = (await engine.stores.apiKeys.create({ name: 'ops console', roles: ['vendor'], vendorId: 'v-log' })).key;
    const created = await engine.stores.webhooks.create('v-log', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
    });
    if (!created.ok) throw new Error('setup');
    webhookId = created.webhook.id;
  });
  afterAll(async () => {
    await engine.close(0);
    await t.cleanup();
  });

  it('names a test event, a replay and a replay of all dead letters, with the webhook, the new ids and the key', async () => {
    const by = {
      level: 30,
      keyName: 'ops console',
      keyId: expect.stringMatching(/^key_/) as unknown,
      vendorId: 'v-log',
      webhookId,
    };
    const sent = (await call('POST', `/vendors/v1/webhooks/${webhookId}/test`)).json<{
      delivery_id: string;
      event_id: string;
    }>();
    expect(lineOf(202)).toMatchObject({
      ...by,
      event: 'webhook.test_sent',
      deliveryId: sent.delivery_id,
      eventId: sent.event_id,
    });

    const deadId = '44444444-4444-4444-8444-444444444444';
    await engine.stores.deliveryLog.recordAttempt({
      job: {
        deliveryId: deadId,
        eventId: 'e-dead',
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        vendorId: 'v-log',
        webhookId,
        body: '{}',
        acceptedAtMs: 1_000,
      },
      attempt: { attempt: 1, atMs: 2_000, outcome: 'http_5xx', statusCode: 500, durationMs: 3 },
      status: 'dead',
    });
    const replayed = await call('POST', `/vendors/v1/webhooks/${webhookId}/dead-letters/${deadId}/replay`);
    expect(lineOf(202)).toMatchObject({
      ...by,
      event: 'dead_letter.replayed',
      replayOf: deadId,
      deliveryId: replayed.json<{ delivery_id: string }>().delivery_id,
    });

    const all = await call('POST', `/vendors/v1/webhooks/${webhookId}/dead-letters/replay`);
    expect(lineOf(202)).toMatchObject({
      ...by,
      event: 'dead_letters.replay_started',
      taskId: all.json<{ task_id: string }>().task_id,
    });
  });

  it('gives a failed request its error code, at info', async () => {
    await call('GET', '/vendors/v1/webhooks/55555555-5555-4555-8555-555555555555/deliveries');
    expect(lineOf(404)).toMatchObject({
      level: 30,
      event: 'http.request',
      code: 'webhook_not_found',
      route: '/vendors/v1/webhooks/:webhook_id/deliveries',
    });
    await engine.api!.inject({ method: 'GET', url: '/vendors/v1/webhooks' });
    expect(lineOf(401)).toMatchObject({ level: 30, code: 'unauthorized' });
    expect(lineOf(401)).not.toHaveProperty('keyId');
  });

  it('logs a bug once, at error, with its stack', async () => {
    // A stored webhook that no longer parses: reading it throws, which no route expects.
    await t.redis.hset(redisKeys(t.prefix).webhooks.byId, webhookId, JSON.stringify({ broken: true }));
    const answered = await call('GET', `/vendors/v1/webhooks/${webhookId}/deliveries`);
    expect(answered.statusCode).toBe(500);
    const line = lineOf(500);
    expect(line).toMatchObject({ level: 50, event: 'http.request', code: 'internal', keyName: 'ops console' });
    expect((line.err as { stack?: string }).stack).toMatch(/\n\s+at /);
  });

  it('logs a request that met a Redis outage at info, with the reason and no stack (the outage itself is logged once, at warn)', async () => {
    engine.stores.redis.disconnect();
    const answered = await call('GET', '/vendors/v1/webhooks');
    expect(answered.statusCode).toBe(503);
    const line = lineOf(503);
    expect(line).toMatchObject({ level: 30, event: 'http.request', code: 'storage_unavailable' });
    expect(line.err).toEqual(expect.stringMatching(/Connection is closed|Stream isn't writeable|enableOfflineQueue/));
  });
});
