import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERRORS, type ErrorCode } from '../../src/admin/errors.js';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { testApp, testConfig, testEngine, type TestApp } from '../helpers/app.js';
import { operationsOf, servedDocument, type OpenApiDocument, type OpenApiOperation } from '../helpers/openapi.js';
import { waitFor } from '../helpers/wait.js';

/** Every operation of the document, the webhooks section's too, by a readable name. */
function allOperations(doc: OpenApiDocument): [string, OpenApiOperation][] {
  const webhooks = Object.entries(doc.webhooks ?? {}).flatMap(([name, item]) =>
    Object.entries(item).map(([method, op]): [string, OpenApiOperation] => [
      `webhook ${name} ${method.toUpperCase()}`,
      op,
    ]),
  );
  return [...operationsOf(doc), ...webhooks];
}

/** The error codes a documented response gives examples of. */
function exampleCodes(op: OpenApiOperation | undefined, status: string): string[] {
  const examples = op?.responses[status]?.content?.['application/json']?.examples ?? {};
  return Object.values(examples).map((example) => (example.value as { code: string }).code);
}

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
      paths: Record<
        string,
        Record<string, { parameters?: { name: string }[]; requestBody?: unknown; responses: Record<string, unknown> }>
      >;
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
        '/vendors/v1/tasks/{task_id}/cancel',
        '/vendors/v1/webhooks/{webhook_id}/events',
        '/vendors/v1/webhooks/{webhook_id}/replay',
        '/admin/v1/replays',
        '/admin/v1/events/{event_id}',
        '/admin/v1/vendors/{vendor_id}/data',
        '/admin/v1/tasks/{task_id}/cancel',
        '/vendors/v1/webhooks/{webhook_id}/test',
        '/vendors/v1/webhooks/{webhook_id}/stats',
        '/vendors/v1/webhooks/{webhook_id}/rotate-secret',
        '/vendors/v1/webhooks/{webhook_id}/rotate-signing-key',
        '/vendors/v1/webhooks/{webhook_id}/public-keys',
        '/vendors/v1/webhooks/{webhook_id}/filter-test',
        '/.well-known/jwks.json',
        '/internal/v1/events',
        '/admin/v1/webhooks',
        '/admin/v1/webhooks/{webhook_id}',
        '/admin/v1/webhooks/{webhook_id}/enable',
        '/admin/v1/webhooks/{webhook_id}/dead-letters/replay',
        '/admin/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay',
        '/admin/v1/dead-letters',
        '/admin/v1/portal/sessions',
        '/admin/v1/portal/sessions/{session_id}',
        '/portal/v1/session',
        '/portal/v1/catalogue',
      ].sort(),
    );
    expect(Object.keys(doc.paths['/vendors/v1/webhooks'] ?? {}).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/vendors/v1/webhooks/{webhook_id}'] ?? {}).sort()).toEqual([
      'delete',
      'get',
      'patch',
    ]);
    expect(Object.keys(doc.paths['/vendors/v1/webhooks']?.post?.responses ?? {})).toEqual(
      expect.arrayContaining(['201', '400', '401', '409']),
    );
    expect(doc.paths['/vendors/v1/webhooks']?.post?.requestBody).toBeDefined();
    expect(doc.paths['/rental/v1/machines']?.get?.parameters?.map((p) => p.name).sort()).toEqual([
      'filter',
      'page',
      'page_size',
    ]);
    expect(Object.keys(doc.paths['/rental/v1/tasks/{task_id}']?.get?.responses ?? {})).toEqual(
      expect.arrayContaining(['200', '400', '404']),
    );
    expect(doc.components.securitySchemes).toHaveProperty('apiKey');
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining([
        'Webhook',
        'Task',
        'AgentDeploymentStatus',
        'Error',
        'Machine',
        'Delivery',
        'DeliveryAttempt',
        'EndpointStats',
        'EndpointStatsWindow',
      ]),
    );
    expect(doc.paths['/internal/v1/events']?.post?.requestBody).toBeDefined();
  });

  it('names every operation, webhooks included, with a unique camelCase operationId that stays put', async () => {
    const doc = await servedDocument(t.app);
    const operations = allOperations(doc);
    // A route missing from OPERATIONS in src/admin/openapi.ts shows up here.
    expect(operations.filter(([, op]) => op.operationId === undefined).map(([name]) => name)).toEqual([]);
    const ids = operations.map(([, op]) => op.operationId ?? '');
    expect(ids.filter((id) => !/^[a-z][a-zA-Z0-9]*$/.test(id))).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
    // Generated clients name their methods after these: renaming one is a breaking change.
    expect(Object.fromEntries(operationsOf(doc).map(([name, op]) => [name, op.operationId]))).toMatchObject({
      'GET /healthz': 'getLiveness',
      'GET /readyz': 'getReadiness',
      'POST /vendors/v1/webhooks': 'createWebhook',
      'GET /vendors/v1/webhooks': 'listWebhooks',
      'GET /vendors/v1/webhooks/{webhook_id}': 'getWebhook',
      'PATCH /vendors/v1/webhooks/{webhook_id}': 'updateWebhook',
      'DELETE /vendors/v1/webhooks/{webhook_id}': 'deleteWebhook',
      'POST /internal/v1/events': 'ingestEvents',
      'GET /vendors/v1/webhooks/{webhook_id}/deliveries': 'listDeliveries',
      'GET /vendors/v1/webhooks/{webhook_id}/deliveries/{delivery_id}': 'getDelivery',
      'GET /vendors/v1/webhooks/{webhook_id}/dead-letters': 'listDeadLetters',
      'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay': 'replayDeadLetter',
      'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/replay': 'replayAllDeadLetters',
      'POST /vendors/v1/tasks/{task_id}/cancel': 'cancelReplay',
      'POST /admin/v1/tasks/{task_id}/cancel': 'cancelAnyReplay',
      'GET /vendors/v1/webhooks/{webhook_id}/events': 'listWebhookEvents',
      'POST /vendors/v1/webhooks/{webhook_id}/replay': 'replayEventRange',
      'POST /admin/v1/replays': 'replayEventRangeOfAnyVendor',
      'DELETE /admin/v1/events/{event_id}': 'eraseEvent',
      'DELETE /admin/v1/vendors/{vendor_id}/data': 'eraseVendorData',
      'POST /vendors/v1/webhooks/{webhook_id}/test': 'sendTestEvent',
      'GET /vendors/v1/webhooks/{webhook_id}/stats': 'getWebhookStats',
      'GET /rental/v1/tasks/{task_id}': 'getTask',
      'GET /rental/v1/machines/agents/{deployment_id}': 'getAgentStatus',
      'GET /rental/v1/machines': 'listMachines',
      'GET /portal/v1/catalogue': 'getEventCatalogue',
      'GET /vendors/v1/webhooks/{webhook_id}/public-keys': 'getWebhookPublicKeys',
      'POST /vendors/v1/webhooks/{webhook_id}/rotate-signing-key': 'rotateWebhookSigningKey',
      'GET /.well-known/jwks.json': 'getKeySet',
      'POST /vendors/v1/webhooks/{webhook_id}/filter-test': 'testWebhookFilter',
    });
  });

  it('describes every answer, and gives each error status an example of every code that answers with it', async () => {
    const doc = await servedDocument(t.app);
    const problems: string[] = [];
    for (const [name, op] of allOperations(doc)) {
      for (const [status, response] of Object.entries(op.responses)) {
        if (!response.description || response.description === 'Default Response')
          problems.push(`${name} ${status}: no description`);
        if (!/^[45]\d\d$/.test(status) || name.startsWith('webhook ') || name === 'GET /readyz') continue;
        const codes = exampleCodes(op, status);
        if (codes.length === 0) problems.push(`${name} ${status}: no example`);
        for (const code of codes) {
          if (ERRORS[code as ErrorCode]?.status !== Number(status))
            problems.push(`${name} ${status}: example of ${code}, which answers ${ERRORS[code as ErrorCode]?.status}`);
          if (!response.description.includes(`\`${code}\``)) problems.push(`${name} ${status}: ${code} not described`);
        }
      }
    }
    expect(problems).toEqual([]);
    // The handlers' own errors are there, with the example a client will really see.
    expect(exampleCodes(doc.paths['/vendors/v1/webhooks']?.post, '409')).toEqual(['webhook_conflict']);
    expect(
      exampleCodes(doc.paths['/vendors/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay']?.post, '409'),
    ).toEqual(['not_dead_letter']);
    expect(exampleCodes(doc.paths['/rental/v1/tasks/{task_id}']?.get, '404')).toEqual(['task_not_found']);
    // A vendor route the portal's session cookie opens also answers the portal's 403s.
    expect(exampleCodes(doc.paths['/vendors/v1/webhooks']?.get, '403').sort()).toEqual([
      'csrf_failed',
      'forbidden',
      'no_vendor',
      'portal_permission',
    ]);
    expect(exampleCodes(doc.paths['/admin/v1/webhooks']?.get, '403').sort()).toEqual(['forbidden']);
  });

  it('documents 401, 403, 429, 500 and 503 wherever a key is needed, with Retry-After on 429 and 503; none on the probes', async () => {
    const doc = await servedDocument(t.app);
    const problems: string[] = [];
    const open: string[] = [];
    const portal: string[] = [];
    for (const [name, op] of operationsOf(doc)) {
      // An operation without its own `security` needs the document's API key; one with the API key
      // or the portal's cookie is a vendor route the portal calls; one with the cookie alone is the portal's own.
      if (op.security !== undefined && op.security.length === 0) {
        open.push(name);
        // Opening a portal session needs no key: the link's token in the body is the credential, and a bad one answers 401.
        if (op.responses['401'] && name !== 'POST /portal/v1/session')
          problems.push(`${name}: needs no key, documents 401`);
        continue;
      }
      if (op.security !== undefined) {
        expect([[{ apiKey: [] }, { portalSession: [] }], [{ portalSession: [] }]], name).toContainEqual(op.security);
        if (op.security.length === 2) portal.push(name);
        else {
          for (const status of ['401', '500', '503']) if (!op.responses[status]) problems.push(`${name}: no ${status}`);
          continue;
        }
      }
      for (const status of ['401', '403', '429', '500', '503'])
        if (!op.responses[status]) problems.push(`${name}: no ${status}`);
      for (const status of ['429', '503'])
        if (!op.responses[status]?.headers?.['Retry-After']) problems.push(`${name} ${status}: no Retry-After`);
    }
    expect(problems).toEqual([]);
    expect(open.sort()).toEqual([
      'GET /.well-known/jwks.json',
      'GET /healthz',
      'GET /portal/v1/catalogue',
      'GET /readyz',
      'POST /portal/v1/session',
    ]);
    // Every vendor route takes the portal's cookie too, and nothing else does.
    expect(portal.filter((name) => !/ \/vendors\/v1\/| \/rental\/v1\/tasks\//.test(name))).toEqual([]);
    expect(portal.length).toBe(operationsOf(doc).filter(([name]) => name.includes(' /vendors/v1/')).length + 1);
    // Ingest is exempt from the per-key request limit; its 429 is its own events-per-second limit.
    expect(doc.paths['/internal/v1/events']?.post?.responses['429']?.description).toContain(
      'HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND',
    );
    expect(exampleCodes(doc.paths['/rental/v1/machines']?.get, '503')).toEqual(['storage_unavailable']);
  });

  it('has what client generators and linters look for: servers, an Apache-2.0 license, a contact and described tags', async () => {
    const doc = await servedDocument(t.app);
    expect(doc.servers?.length).toBeGreaterThan(0);
    expect(doc.info.license).toMatchObject({ name: 'Apache-2.0', identifier: 'Apache-2.0' });
    expect(doc.info.contact).toBeDefined();
    const declared = new Map((doc.tags ?? []).map((tag) => [tag.name, tag.description ?? '']));
    const used = new Set(allOperations(doc).flatMap(([, op]) => op.tags ?? []));
    expect([...used].filter((tag) => !declared.get(tag))).toEqual([]);
    expect([...declared.keys()].filter((tag) => !used.has(tag))).toEqual([]);
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
    const engine = await testEngine(testConfig({ redisUrl: `redis://127.0.0.1:${deadPort}`, redisPrefix: 'dead' }), {
      role: 'api',
    });
    const app = engine.api!;
    try {
      const ready = await app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toEqual({ status: 'unavailable', error: 'Redis is unreachable' });
      const res = await app.inject({
        method: 'GET',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': 'hk_whatever' },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ error: 'Storage is unreachable; try again shortly', code: 'storage_unavailable' });
      // As the document says: the code among the 503's examples, and a Retry-After.
      expect(res.headers['retry-after']).toBe('1');
      expect(exampleCodes((await servedDocument(app)).paths['/vendors/v1/webhooks']?.get, '503')).toContain(
        'storage_unavailable',
      );
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
      testConfig({
        redisUrl: server.url,
        redisPrefix: 'oom',
        retryScheduleMs: [0],
        queuePartitions: 1,
        secretRotationOverlapMs: 0,
      }),
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
        payload: {
          event_type: 'EVENT_TYPE_MACHINE_CREATED',
          callback_url: 'https://example.com/h',
          secret: 'x'.repeat(400),
        },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ error: 'Storage is unreachable; try again shortly', code: 'storage_unavailable' });
      expect(
        (await app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } })).statusCode,
      ).toBe(200);
    } finally {
      await engine.close(0);
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a rate-limited key', () => {
  it('gets the 429 the document shows, with its Retry-After', async () => {
    const t = await testApp({ rateLimitPerSecond: 1 });
    try {
      const key = await t.keyFor(['vendor'], 'v');
      // Two requests in one second pass the limit of one; a second boundary between them may let one more through.
      const limited = await waitFor(
        async () => {
          const res = await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } });
          return res.statusCode === 429 ? res : undefined;
        },
        10_000,
        'a 429',
        0,
      );
      expect(limited.headers['retry-after']).toBe('1');
      const body = limited.json<{ error: string; code: string }>();
      const doc = await servedDocument(t.app);
      const documented = doc.paths['/vendors/v1/webhooks']?.get?.responses['429']?.content?.['application/json']
        ?.examples?.[body.code]?.value as { error: string; code: string } | undefined;
      expect(documented?.code).toBe(body.code);
      // The same message but for the configured limit.
      expect(documented?.error.replace(/\d+/, 'N')).toBe(body.error.replace(/\d+/, 'N'));
    } finally {
      await t.close();
    }
  });
});
