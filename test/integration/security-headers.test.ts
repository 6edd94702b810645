import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PORTAL_CSP } from '../../src/admin/routes/portal-assets.js';
import { DOCS_CSP } from '../../src/admin/security-headers.js';
import { buildAdminServer, buildHealthServer } from '../../src/admin/server.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { servedRoutes } from '../helpers/openapi.js';

const SOME_UUID = '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f';

/** A route's path with its parameters filled in, well-formed enough to reach the handler. */
const concrete = (url: string) =>
  url
    .replace(':session_id', `ps_${'0'.repeat(24)}`)
    .replace(':file', 'app-ABCD1234.js')
    .replace('*', 'swagger-ui.css')
    .replace(/:\w+/g, SOME_UUID);

/** The answers that choose to be cached: public, and holding nothing of anyone's. */
const CACHEABLE = new Set([
  'GET /.well-known/jwks.json',
  'GET /docs/static/*',
  'GET /docs/static/index.html',
  'GET /docs/static/swagger-initializer.js',
]);

describe('security headers on every answer', () => {
  let t: TestApp;
  let keys: Record<string, string>;
  beforeAll(async () => {
    t = await testApp();
    keys = { none: '', admin: await t.keyFor(['admin'], 'vendor-headers') };
  });
  afterAll(async () => t.close());

  it('nosniff on every route’s answers, success and error alike; no-store on all but the public cacheable ones', async () => {
    const seen: string[] = [];
    for (const route of servedRoutes(t.app)) {
      for (const [who, key] of Object.entries(keys)) {
        const res = await t.app.inject({
          method: route.method as 'GET',
          url: concrete(route.url),
          headers: key ? { 'x-api-key': key } : {},
          ...(route.method === 'GET' || route.method === 'DELETE' ? {} : { payload: {} }),
        });
        const name = `${route.method} ${route.url} (${who}: ${res.statusCode})`;
        seen.push(name);
        expect(res.headers['x-content-type-options'], name).toBe('nosniff');
        if (!CACHEABLE.has(`${route.method} ${route.url}`)) expect(res.headers['cache-control'], name).toBe('no-store');
        expect(res.headers['strict-transport-security'], name).toBeUndefined();
      }
    }
    // Successes and every kind of refusal went through the check.
    for (const status of [200, 400, 401, 404])
      expect(
        seen.some((name) => name.endsWith(`: ${status})`)),
        String(status),
      ).toBe(true);
  });

  it('a vendor’s secret-bearing answers are never stored: listing and rotating', async () => {
    const { id, key } = await t.register('vendor-secrets', 'https://hooks.example.com/a', {
      secret: 'a-secret-to-keep-out-of-caches',
    });
    for (const [method, url] of [
      ['GET', '/vendors/v1/webhooks'],
      ['POST', `/vendors/v1/webhooks/${id}/rotate-secret`],
    ] as const) {
      const res = await t.app.inject({ method, url, headers: { 'x-api-key': key } });
      expect(res.statusCode, url).toBe(200);
      expect(res.body, url).toMatch(/secret/);
      expect(res.headers['cache-control'], url).toBe('no-store');
    }
  });

  it('the 404 of an unknown route carries nosniff and no-store too', async () => {
    for (const url of ['/nope', '/vendors/v1/nope', '/.well-known/other']) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(404);
      expect(res.headers['x-content-type-options'], url).toBe('nosniff');
      expect(res.headers['cache-control'], url).toBe('no-store');
    }
  });

  it('holds every answer under /portal to the portal’s CSP, its 404s included', async () => {
    for (const url of [
      '/portal/nope',
      '/portal/assets/a/b',
      '/portal/v1/nope',
      '/portal/v1/session/x',
      '/portal/?x=1',
    ]) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.headers['content-security-policy'], url).toBe(PORTAL_CSP);
      expect(res.headers['referrer-policy'], url).toBe('no-referrer');
      expect(res.headers['x-content-type-options'], url).toBe('nosniff');
    }
    expect((await t.app.inject({ method: 'GET', url: '/portal/nope' })).statusCode).toBe(404);
    // Only the portal's: another path is not held to a policy that would break it.
    expect((await t.app.inject({ method: 'GET', url: '/portals' })).headers['content-security-policy']).toBeUndefined();
  });

  it('serves /docs (Swagger UI) under a CSP of its own: its scripts only, no other origin, no framing', async () => {
    for (const url of ['/docs/', '/docs/static/swagger-initializer.js', '/docs/static/swagger-ui.css', '/docs/json']) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-security-policy'], url).toBe(DOCS_CSP);
    }
    expect(DOCS_CSP).toContain("script-src 'self';");
    expect(DOCS_CSP).toContain("frame-ancestors 'none'");
    expect(DOCS_CSP).not.toMatch(/\*|https?:|unsafe-eval/);
  });

  it('adds HSTS over https only: through a proxy HOOKLINE_TRUST_PROXY names, or with an https HOOKLINE_PUBLIC_URL', async () => {
    const cases: [{ trustProxy?: string[]; publicUrl?: string }, boolean][] = [
      [{}, false],
      [{ trustProxy: ['10.0.0.0/8'] }, false],
      [{ trustProxy: ['127.0.0.1'] }, true],
      [{ publicUrl: 'https://hooks.example.com' }, true],
      [{ publicUrl: 'http://hooks.example.com' }, false],
    ];
    for (const [extra, hsts] of cases) {
      const server = await buildAdminServer(
        t.adminDeps({
          logger: pino({ level: 'silent' }),
          bodyLimitBytes: 1 << 20,
          isReady: async () => true,
          ...extra,
        }),
      );
      try {
        // app.inject connects from 127.0.0.1, saying it came over https.
        for (const url of ['/healthz', '/vendors/v1/webhooks', '/portal/']) {
          const res = await server.inject({ method: 'GET', url, headers: { 'x-forwarded-proto': 'https' } });
          expect(res.headers['strict-transport-security'], `${JSON.stringify(extra)} ${url}`).toBe(
            hsts ? 'max-age=31536000' : undefined,
          );
        }
      } finally {
        await server.close();
      }
    }
  });

  it('the standalone worker’s health server answers with nosniff and no-store too', async () => {
    const server = await buildHealthServer({
      logger: pino({ level: 'silent' }),
      isReady: async () => true,
      metrics: createMetrics({ role: 'worker', defaultMetrics: false }),
    });
    try {
      for (const url of ['/healthz', '/readyz', '/metrics', '/nope']) {
        const res = await server.inject({ method: 'GET', url });
        expect(res.headers['x-content-type-options'], url).toBe('nosniff');
        expect(res.headers['cache-control'], url).toBe('no-store');
      }
    } finally {
      await server.close();
    }
  });
});
