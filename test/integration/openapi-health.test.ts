import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { testApp, testConfig, testEngine, type TestApp } from '../helpers/app.js';

describe('OpenAPI, docs and health', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await testApp();
  });
  afterAll(async () => t.close());

  it('serves an OpenAPI 3 document covering every seed endpoint, generated from the route schemas', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json<{
      openapi: string;
      paths: Record<string, Record<string, { parameters?: { name: string }[]; requestBody?: unknown; responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> };
    }>();
    expect(doc.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.paths).sort()).toEqual(
      [
        '/healthz',
        '/readyz',
        '/rental/v1/machines',
        '/rental/v1/machines/agents/{deployment_id}',
        '/rental/v1/tasks/{task_id}',
        '/vendors/v1/webhooks',
        '/vendors/v1/webhooks/{webhook_id}',
        '/vendors/v1/webhooks/{webhook_id}/deliveries',
        '/vendors/v1/webhooks/{webhook_id}/deliveries/{delivery_id}',
        '/vendors/v1/webhooks/{webhook_id}/dead-letters',
        '/vendors/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay',
        '/vendors/v1/webhooks/{webhook_id}/dead-letters/replay',
        '/vendors/v1/webhooks/{webhook_id}/test',
        '/vendors/v1/webhooks/{webhook_id}/rotate-secret',
        '/internal/v1/events',
        '/admin/v1/webhooks',
        '/admin/v1/webhooks/{webhook_id}',
        '/admin/v1/webhooks/{webhook_id}/enable',
        '/admin/v1/webhooks/{webhook_id}/dead-letters/replay',
        '/admin/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay',
        '/admin/v1/dead-letters',
      ].sort(),
    );
    expect(Object.keys(doc.paths['/vendors/v1/webhooks'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/vendors/v1/webhooks/{webhook_id}'] ?? {}).sort()).toEqual(['delete', 'patch']);
    expect(Object.keys(doc.paths['/vendors/v1/webhooks']?.post?.responses ?? {})).toEqual(expect.arrayContaining(['201', '400', '401', '409']));
    expect(doc.paths['/vendors/v1/webhooks']?.post?.requestBody).toBeDefined();
    expect(doc.paths['/rental/v1/machines']?.get?.parameters?.map((p) => p.name).sort()).toEqual(['filter', 'page', 'page_size']);
    expect(Object.keys(doc.paths['/rental/v1/tasks/{task_id}']?.get?.responses ?? {})).toEqual(expect.arrayContaining(['200', '400', '404']));
    expect(doc.components.securitySchemes).toHaveProperty('apiKey');
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(['Webhook', 'Task', 'AgentDeploymentStatus', 'Error', 'Machine', 'Delivery', 'DeliveryAttempt']),
    );
    expect(doc.paths['/internal/v1/events']?.post?.requestBody).toBeDefined();
  });

  it('serves the docs UI at /docs', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/docs/' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/html');
    expect(res.body).toContain('swagger');
  });

  it('answers /healthz and /readyz without a key', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' });
    const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toEqual({ status: 'ready' });
  });

  it('answers 404 {error} for an unknown route or method', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/nope' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'Route not found', code: 'route_not_found' });
    expect((await t.app.inject({ method: 'PUT', url: '/vendors/v1/webhooks' })).statusCode).toBe(404);
  });
});

describe('readiness when Redis is unreachable', () => {
  it('answers /readyz 503 and a protected route 503 instead of hanging or crashing', async () => {
    const deadPort = await freeLoopbackPort();
    const engine = await testEngine(testConfig({ redisUrl: `redis://127.0.0.1:${deadPort}`, redisPrefix: 'dead' }), { role: 'api' });
    const app = engine.api!;
    try {
      const ready = await app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toEqual({ status: 'unavailable', error: 'Redis is unreachable' });
      const res = await app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': 'hk_whatever' } });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ error: 'Storage is unreachable; try again shortly', code: 'storage_unavailable' });
    } finally {
      await engine.close(0);
    }
  });
});

describe('a full Redis (maxmemory with noeviction)', () => {
  it('answers 503 storage_unavailable, not 500, and keeps serving reads', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const path = await import('node:path');
    const { ensureRedisServerBinary, startRedisServer } = await import('../../src/embedded/redis-server.js');
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-oom-'));
    const server = await startRedisServer({
      binary: await ensureRedisServerBinary(() => undefined),
      port: 0,
      dir,
      appendOnly: false,
      extraArgs: ['--maxmemory', '2mb'],
    });
    const engine = await testEngine(
      testConfig({ redisUrl: server.url, redisPrefix: 'oom', retryScheduleMs: [0], queuePartitions: 1, secretRotationOverlapMs: 0 }),
      { role: 'api' },
    );
    const { stores } = engine;
    const { redis } = stores;
    const app = engine.api!;
    try {
      const { key } = await stores.apiKeys.create({ name: 'v', roles: ['vendor'], vendorId: 'v' });
      // Redis full: its limit below what it holds already, so every write is refused (OOM) while
      // reads go on. (Filling it up to the limit instead leaves a gap that freed client buffers
      // can widen under load.)
      await redis.call('CONFIG', 'SET', 'maxmemory', '1');
      await expect(redis.set('{oom:filler}:1', 'x')).rejects.toThrow(/OOM/);
      const res = await app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': key },
        payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://example.com/h', secret: 'x'.repeat(400) },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ error: 'Storage is unreachable; try again shortly', code: 'storage_unavailable' });
      expect((await app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } })).statusCode).toBe(200);
    } finally {
      await engine.close(0);
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
