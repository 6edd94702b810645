import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLES, type Role } from '../../src/domain/roles.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { servedRoutes } from '../helpers/openapi.js';

const SOME_UUID = '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f';

interface ProtectedRoute {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  /** The path as the server names it (`:webhook_id`); ids are filled in with SOME_UUID. */
  route: string;
  /** A query string the route needs to reach its handler. */
  query?: string;
  role: Role;
  also?: Role;
  payload?: object;
}

/**
 * Every route that takes an API key, with the role it needs and a well-formed request. The server's
 * own route list is checked against this table and PUBLIC below ("every route the server has…"), so
 * a route added without a row fails that test.
 */
const PROTECTED: ProtectedRoute[] = [
  // A vendor key reads the tasks it started (another vendor's are "not found" to it).
  { method: 'GET', route: '/rental/v1/tasks/:task_id', role: 'tasks:read', also: 'vendor' },
  { method: 'GET', route: '/admin/v1/webhooks', role: 'admin' },
  { method: 'GET', route: '/admin/v1/webhooks/:webhook_id', role: 'admin' },
  { method: 'GET', route: '/admin/v1/dead-letters', role: 'admin' },
  { method: 'POST', route: '/admin/v1/webhooks/:webhook_id/enable', role: 'admin' },
  { method: 'POST', route: '/admin/v1/webhooks/:webhook_id/dead-letters/replay', role: 'admin' },
  { method: 'POST', route: '/admin/v1/webhooks/:webhook_id/dead-letters/:delivery_id/replay', role: 'admin' },
  { method: 'POST', route: '/admin/v1/portal/sessions', role: 'portal:issue', payload: { vendor_id: 'vendor-1' } },
  { method: 'GET', route: '/admin/v1/portal/sessions', query: 'vendor_id=vendor-1', role: 'portal:issue' },
  { method: 'DELETE', route: '/admin/v1/portal/sessions', query: 'vendor_id=vendor-1', role: 'portal:issue' },
  { method: 'DELETE', route: '/admin/v1/portal/sessions/:session_id', role: 'portal:issue' },
  { method: 'GET', route: '/rental/v1/machines', role: 'machines:read' },
  { method: 'GET', route: '/rental/v1/machines/agents/:deployment_id', role: 'agents:read' },
  {
    method: 'POST',
    route: '/vendors/v1/webhooks',
    role: 'vendor',
    payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example.com/' },
  },
  { method: 'GET', route: '/vendors/v1/webhooks', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id', role: 'vendor' },
  {
    method: 'PATCH',
    route: '/vendors/v1/webhooks/:webhook_id',
    role: 'vendor',
    payload: { callback_url: 'https://b.example.com/' },
  },
  { method: 'DELETE', route: '/vendors/v1/webhooks/:webhook_id', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/deliveries', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/deliveries/:delivery_id', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/dead-letters', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/dead-letters/:delivery_id/replay', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/dead-letters/replay', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/tasks/:task_id/cancel', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/events', role: 'vendor' },
  {
    method: 'POST',
    route: '/vendors/v1/webhooks/:webhook_id/replay',
    role: 'vendor',
    payload: { since: '2026-01-01T00:00:00Z', dry_run: true },
  },
  { method: 'DELETE', route: '/admin/v1/events/:event_id', role: 'admin' },
  { method: 'DELETE', route: '/admin/v1/vendors/:vendor_id/data', role: 'admin' },
  {
    method: 'POST',
    route: '/admin/v1/replays',
    role: 'admin',
    payload: { vendor_id: 'vendor-1', since: '2026-01-01T00:00:00Z', dry_run: true },
  },
  { method: 'POST', route: '/admin/v1/tasks/:task_id/cancel', role: 'admin' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/test', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/rotate-secret', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/rotate-signing-key', role: 'vendor' },
  { method: 'POST', route: '/vendors/v1/webhooks/:webhook_id/filter-test', role: 'vendor', payload: {} },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/public-keys', role: 'vendor' },
  { method: 'GET', route: '/vendors/v1/webhooks/:webhook_id/stats', role: 'vendor' },
  {
    method: 'POST',
    route: '/internal/v1/events',
    role: 'events:write',
    payload: { event_type: 'TASK_UPDATED', data: { task_id: SOME_UUID, status: 'pending', fail_reason: null } },
  },
];

/** The routes that need no API key: public documents and pages, and the portal's link opening (its token is in the body). */
const PUBLIC = [
  'GET /healthz',
  'GET /readyz',
  'GET /openapi.json',
  'GET /metrics',
  'GET /docs',
  'GET /docs/',
  'GET /docs/json',
  'GET /docs/yaml',
  'GET /docs/static/index.html',
  'GET /docs/static/swagger-initializer.js',
  'GET /docs/static/*',
  'GET /.well-known/jwks.json',
  'GET /portal',
  'GET /portal/',
  'GET /portal/assets/:file',
  'GET /portal/v1/catalogue',
  'POST /portal/v1/session',
];

/** The portal's own session routes: only the session cookie opens them, never a key. */
const SESSION_ONLY = ['GET /portal/v1/session', 'DELETE /portal/v1/session'];

/** A path of the server's with its parameters filled in, and the row's query string. */
function concreteUrl(route: string, query?: string): string {
  const path = route
    .replace(':deployment_id', 'dep-1')
    .replace(':session_id', `ps_${'0'.repeat(24)}`)
    .replace(':file', 'app-ABCD1234.js')
    .replace('*', 'swagger-ui.css')
    .replace(/:\w+/g, SOME_UUID);
  return query === undefined ? path : `${path}?${query}`;
}

const ROUTES = PROTECTED.map((row) => ({ ...row, url: concreteUrl(row.route, row.query) }));

/** `url` with one more query parameter. */
const withParameter = (url: string, parameter: string) => `${url}${url.includes('?') ? '&' : '?'}${parameter}`;

describe('authentication and roles', () => {
  let t: TestApp;
  let revokedKey: string;

  beforeAll(async () => {
    t = await testApp();
    const { key, record } = await t.apiKeys.create({ name: 'to revoke', roles: [...ROLES], vendorId: 'vendor-1' });
    revokedKey = key;
    expect(await t.apiKeys.revoke(record.id)).toEqual(record);
  });
  afterAll(async () => t.close());

  describe.each(ROUTES)('$method $url (role $role)', (route) => {
    const call = (headers: Record<string, string>) =>
      t.app.inject({
        method: route.method,
        url: route.url,
        headers,
        ...(route.payload ? { payload: route.payload } : {}),
      });

    it('answers 401 without a key', async () => {
      const res = await call({});
      expect(res.statusCode).toBe(401);
      expect(res.json()).toEqual({ error: 'Missing or invalid API key', code: 'unauthorized' });
    });

    it('answers 401 for an unknown, a malformed and a revoked key', async () => {
      for (const key of ['hk_doesnotexist', 'garbage', revokedKey, ' ']) {
        expect((await call({ 'x-api-key': key })).statusCode).toBe(401);
      }
    });

    it('answers 401 before looking at a malformed body', async () => {
      if (!route.payload) return;
      const res = await t.app.inject({
        method: route.method,
        url: route.url,
        headers: { 'content-type': 'application/json' },
        payload: '{oops',
      });
      expect(res.statusCode).toBe(401);
    });

    it('answers 403 for a valid key without the role', async () => {
      const otherRoles = ROLES.filter((r) => r !== route.role && r !== route.also && r !== 'admin');
      const key = await t.keyFor(otherRoles, 'vendor-1');
      const res = await call({ 'x-api-key': key });
      expect(res.statusCode).toBe(403);
      const roles = route.also === undefined ? route.role : `${route.role} or ${route.also}`;
      expect(res.json()).toEqual({ error: `This API key does not have the ${roles} role`, code: 'forbidden' });
    });

    it('lets the role (and admin) through', async () => {
      for (const roles of [[route.role], ['admin'], ...(route.also ? [[route.also]] : [])] as Role[][]) {
        const key = await t.keyFor(roles, 'vendor-1');
        expect([401, 403]).not.toContain((await call({ 'x-api-key': key })).statusCode);
      }
    });
  });

  it('answers 400 naming an unknown query parameter on every route, after authenticating (so ?api_key= answers 401)', async () => {
    const key = await t.keyFor(['admin'], 'vendor-1');
    for (const route of ROUTES) {
      const url = withParameter(route.url, 'foo=1');
      const res = await t.app.inject({
        method: route.method,
        url,
        headers: { 'x-api-key': key },
        ...(route.payload ? { payload: route.payload } : {}),
      });
      expect([route.method, url, res.statusCode]).toEqual([route.method, url, 400]);
      expect(res.json<{ error: string; code: string }>()).toMatchObject({
        code: 'invalid_request',
        error: expect.stringContaining('Invalid query parameters: unknown parameter "foo"') as string,
      });
      // A key in the query string is not a key: 401, before any validation.
      const inQuery = await t.app.inject({
        method: route.method,
        url: withParameter(route.url, `api_key=${key}`),
        ...(route.payload ? { payload: route.payload } : {}),
      });
      expect([route.method, route.url, inQuery.statusCode]).toEqual([route.method, route.url, 401]);
    }
  });

  it('every route the server has is in this matrix: each one that takes a key with its role, the others public or cookie-only', async () => {
    const served = servedRoutes(t.app).map(({ method, url }) => `${method} ${url}`);
    const listed = [...PROTECTED.map(({ method, route }) => `${method} ${route}`), ...PUBLIC, ...SESSION_ONLY];
    // A route added without a row, or a row whose route is gone.
    expect(served.filter((name) => !listed.includes(name))).toEqual([]);
    expect(listed.filter((name) => !served.includes(name))).toEqual([]);
  });

  it('answers the public routes without a key, and the portal’s session routes to its cookie only, never to a key', async () => {
    for (const name of PUBLIC) {
      const [method, route] = name.split(' ') as ['GET' | 'POST', string];
      const res = await t.app.inject({ method, url: concreteUrl(route) });
      expect([name, [401, 403].includes(res.statusCode)]).toEqual([name, false]);
    }
    const key = await t.keyFor([...ROLES], 'vendor-1');
    for (const name of SESSION_ONLY) {
      const [method, route] = name.split(' ') as ['GET' | 'DELETE', string];
      for (const headers of [{}, { 'x-api-key': key }]) {
        const res = await t.app.inject({ method, url: route, headers });
        expect([name, res.statusCode]).toEqual([name, 401]);
      }
    }
  });

  it('answers 403 on vendor routes for a key bound to no vendor', async () => {
    const key = await t.keyFor(['admin']);
    const res = await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': key } });
    expect(res.statusCode).toBe(403);
    expect(res.json()).toEqual({ error: 'This API key is not bound to a vendor', code: 'no_vendor' });
  });

  it('stores only a hash of each key', async () => {
    const key = await t.keyFor(['tasks:read']);
    const dump =
      JSON.stringify(await t.redis.hgetall(t.keys.apiKeys.byHash)) +
      JSON.stringify(await t.redis.hgetall(t.keys.apiKeys.hashById));
    expect(dump).not.toContain(key);
    expect(dump).not.toContain(key.slice(3));
  });
});

describe('per-key rate limit', () => {
  it('answers 429 with Retry-After past the limit, counts per key, and recovers in the next second', async () => {
    const t = await testApp({ rateLimitPerSecond: 5 });
    try {
      const a = await t.keyFor(['tasks:read']);
      const b = await t.keyFor(['tasks:read']);
      const url = '/rental/v1/tasks/3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f';
      // Start at the beginning of a second so the burst stays in one window.
      await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));
      const codes = await Promise.all(
        Array.from({ length: 8 }, () => t.app.inject({ method: 'GET', url, headers: { 'x-api-key': a } })),
      );
      expect(codes.filter((r) => r.statusCode === 404)).toHaveLength(5);
      const limited = codes.filter((r) => r.statusCode === 429);
      expect(limited).toHaveLength(3);
      expect(limited[0]?.headers['retry-after']).toBe('1');
      expect(limited[0]?.json()).toEqual({
        error: 'Rate limit of 5 requests per second for this API key exceeded; retry after 1 s',
        code: 'rate_limited',
      });
      // Another key has its own budget.
      expect((await t.app.inject({ method: 'GET', url, headers: { 'x-api-key': b } })).statusCode).toBe(404);
      await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));
      expect((await t.app.inject({ method: 'GET', url, headers: { 'x-api-key': a } })).statusCode).toBe(404);
    } finally {
      await t.close();
    }
  });
});

describe('per-address limit on requests that authenticate nothing', () => {
  const TASK = `/rental/v1/tasks/${SOME_UUID}`;
  /** Waits for the start of the next second, so a burst falls into as few one-second windows as it can. */
  const nextSecond = () => new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));

  it('answers 429 with Retry-After past the limit for missing and bad keys, bad cookies and link openings from one address; valid keys and other addresses go on', async () => {
    const t = await testApp({ unauthenticatedRateLimitPerSecond: 5 });
    try {
      const valid = await t.keyFor(['tasks:read']);
      const from = (
        remoteAddress: string,
        options: { method?: 'GET' | 'POST'; url?: string; headers?: Record<string, string>; payload?: object } = {},
      ) =>
        t.app.inject({
          method: options.method ?? 'GET',
          url: options.url ?? TASK,
          headers: options.headers ?? {},
          remoteAddress,
          ...(options.payload ? { payload: options.payload } : {}),
        });
      const attacker = '198.51.100.7';
      const refused = () => [
        from(attacker),
        from(attacker, { headers: { 'x-api-key': 'hk_guess' } }),
        from(attacker, { url: '/vendors/v1/webhooks', headers: { cookie: '__Host-hookline_portal=ps_guess.guess' } }),
        from(attacker, { url: '/portal/v1/session', headers: { cookie: '__Host-hookline_portal=ps_guess.guess' } }),
        from(attacker, { method: 'POST', url: '/portal/v1/session', payload: { token: 'ps_guess.guess' } }),
        from(attacker, {
          method: 'POST',
          url: '/internal/v1/events',
          headers: { 'x-api-key': 'hk_guess' },
          payload: {},
        }),
      ];
      await nextSecond();
      const [bad, good, other] = await Promise.all([
        Promise.all([...refused(), ...refused()]),
        Promise.all(Array.from({ length: 4 }, () => from(attacker, { headers: { 'x-api-key': valid } }))),
        Promise.all(Array.from({ length: 3 }, () => from('198.51.100.8', { headers: { 'x-api-key': 'hk_guess' } }))),
      ]);
      const statuses = bad.map((res) => res.statusCode);
      console.log(`address limit 5/s: twelve refused requests answered ${statuses.join(' ')}`);
      // Twelve at once, five a second: whichever second boundary they straddle, some are refused.
      expect(statuses.filter((status) => status !== 401 && status !== 429)).toEqual([]);
      const limited = bad.filter((res) => res.statusCode === 429);
      expect(limited.length).toBeGreaterThanOrEqual(2);
      expect(limited[0]!.headers['retry-after']).toBe('1');
      expect(limited[0]!.json()).toEqual({
        error: 'More than 5 requests per second from this address authenticated nothing; retry after 1 s',
        code: 'rate_limited',
      });
      // A valid key from the same address is not counted or refused; another address has its own budget.
      expect(good.map((res) => res.statusCode)).toEqual([404, 404, 404, 404]);
      expect(other.map((res) => res.statusCode)).toEqual([401, 401, 401]);
      // The next second, the address is heard again.
      await nextSecond();
      expect((await from(attacker)).statusCode).toBe(401);
    } finally {
      await t.close();
    }
  });

  it('takes the address from X-Forwarded-For only behind a proxy HOOKLINE_TRUST_PROXY names, so a forged header escapes nothing', async () => {
    const t = await testApp();
    const { buildAdminServer } = await import('../../src/admin/server.js');
    const { pino } = await import('pino');
    try {
      for (const [trustProxy, escapes] of [
        [[], false],
        [['127.0.0.1'], true],
      ] as const) {
        const server = await buildAdminServer(
          t.adminDeps({
            logger: pino({ level: 'silent' }),
            bodyLimitBytes: 1 << 20,
            isReady: async () => true,
            unauthenticatedRateLimitPerSecond: 3,
            trustProxy,
          }),
        );
        try {
          await nextSecond();
          // Eight requests, each claiming another client: behind a trusted proxy, eight clients.
          const answers = await Promise.all(
            Array.from({ length: 8 }, (_, i) =>
              server.inject({ method: 'GET', url: TASK, headers: { 'x-forwarded-for': `203.0.113.${i + 1}` } }),
            ),
          );
          const limited = answers.filter((res) => res.statusCode === 429).length;
          expect(limited > 0, `trustProxy ${JSON.stringify(trustProxy)}: ${limited} limited`).toBe(!escapes);
        } finally {
          await server.close();
        }
      }
    } finally {
      await t.close();
    }
  });
});

describe('another vendor’s resources', () => {
  it('answers every vendor route on someone else’s webhook exactly as on one that does not exist: 404, so ids leak nothing', async () => {
    const t = await testApp();
    try {
      const created = await t.webhooks.create('owner', {
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        callbackUrl: 'https://example.com/h',
        signature: 'ed25519',
      });
      if (!created.ok) throw new Error('setup');
      const id = created.webhook.id;
      const intruder = await t.keyFor(['vendor'], 'intruder');
      // Every route of one webhook, from the matrix the server's route list is checked against.
      const routes = PROTECTED.filter((row) => row.route.startsWith('/vendors/v1/webhooks/:webhook_id'));
      expect(routes.length).toBeGreaterThanOrEqual(13);
      const ask = (row: ProtectedRoute, webhookId: string) =>
        t.app.inject({
          method: row.method,
          url: concreteUrl(row.route.replace(':webhook_id', webhookId), row.query),
          headers: { 'x-api-key': intruder },
          ...(row.payload
            ? { payload: row.method === 'PATCH' ? { callback_url: 'https://evil.example.com/' } : row.payload }
            : {}),
        });
      for (const row of routes) {
        const [theirs, nobodys] = [await ask(row, id), await ask(row, '0b6a1f2e-7c3d-4e5f-8a9b-0c1d2e3f4a5b')];
        const name = `${row.method} ${row.route}`;
        expect([name, theirs.statusCode, theirs.json<{ code: string }>().code]).toEqual([
          name,
          404,
          'webhook_not_found',
        ]);
        expect([name, theirs.body]).toEqual([name, nobodys.body]);
      }
      // Untouched, and not listed for the intruder.
      expect((await t.webhooks.getById(id))?.callbackUrl).toBe('https://example.com/h');
      expect(
        (await t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': intruder } })).json(),
      ).toEqual({ webhooks: [] });
    } finally {
      await t.close();
    }
  });
});
