import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { PORTAL_CSP } from '../../src/admin/routes/portal-assets.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { servedDocument } from '../helpers/openapi.js';
import { FAKE_PORTAL, fakePortalBuild } from '../helpers/portal-build.js';

const { script: SCRIPT, styles: STYLES, index: INDEX } = FAKE_PORTAL;

function expectSecurityHeaders(headers: Record<string, unknown>): void {
  expect(headers['content-security-policy']).toBe(PORTAL_CSP);
  expect(headers['x-content-type-options']).toBe('nosniff');
  expect(headers['referrer-policy']).toBe('no-referrer');
}

describe('the portal’s page and assets, served from a build', () => {
  let t: TestApp;
  let dir: string;
  beforeAll(async () => {
    dir = fakePortalBuild();
    t = await testApp({ portalAssetsDir: dir });
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves index.html at /portal/, never cached, under a CSP that allows no inline code and no other origin', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/portal/' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toBe(INDEX);
    expectSecurityHeaders(res.headers);
    expect(PORTAL_CSP).toContain("script-src 'self';");
    expect(PORTAL_CSP).not.toMatch(/unsafe|\*|https?:/);
    expect(PORTAL_CSP).toContain("frame-ancestors 'none'");
  });

  it('redirects /portal to /portal/ (a browser keeps the link’s fragment across it)', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/portal' });
    expect(res.statusCode).toBe(301);
    expect(res.headers.location).toBe('/portal/');
    expectSecurityHeaders(res.headers);
  });

  it('serves hashed assets with their type and a long cache, unhashed ones revalidated', async () => {
    const script = await t.app.inject({ method: 'GET', url: '/portal/assets/app-ABCD1234.js' });
    expect(script.statusCode).toBe(200);
    expect(script.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(script.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect(script.body).toBe(SCRIPT);
    expectSecurityHeaders(script.headers);
    const styles = await t.app.inject({ method: 'GET', url: '/portal/assets/app-EFGH5678.css' });
    expect(styles.headers['content-type']).toBe('text/css; charset=utf-8');
    expect(styles.body).toBe(STYLES);
    const unhashed = await t.app.inject({ method: 'GET', url: '/portal/assets/unhashed.js' });
    expect(unhashed.statusCode).toBe(200);
    expect(unhashed.headers['cache-control']).toBe('no-cache');
  });

  it('answers 404 with the error body for anything but a served asset: unknown names, other types, paths out of assets/', async () => {
    for (const file of [
      'missing.js',
      'notes.txt',
      '..%2Fsecret.json',
      '..%2Findex.html',
      '%2e%2e%2fsecret.json',
      '__proto__',
      'constructor',
    ]) {
      const res = await t.app.inject({ method: 'GET', url: `/portal/assets/${file}` });
      expect(res.statusCode, file).toBe(404);
      expect(res.json(), file).toEqual({ error: 'Route not found', code: 'route_not_found' });
      expectSecurityHeaders(res.headers);
    }
    expect((await t.app.inject({ method: 'GET', url: '/portal/secret.json' })).statusCode).toBe(404);
    expect((await t.app.inject({ method: 'GET', url: '/portal/assets/../secret.json' })).statusCode).toBe(404);
  });

  it('reads the build once, when the server is built: files written later are not served', async () => {
    writeFileSync(path.join(dir, 'assets', 'late-ZZZZ9999.js'), SCRIPT);
    expect((await t.app.inject({ method: 'GET', url: '/portal/assets/late-ZZZZ9999.js' })).statusCode).toBe(404);
  });

  it('keeps the page and its assets out of the OpenAPI document: they are not API', async () => {
    const doc = await servedDocument(t.app);
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/portal') && !p.startsWith('/portal/v1/'))).toEqual([]);
    expect(doc.paths['/portal/v1/catalogue']).toBeDefined();
  });
});

describe('the portal without a build', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await testApp({ portalAssetsDir: path.join(tmpdir(), 'hookline-portal-never-built') });
  });
  afterAll(async () => t.close());

  it('answers 503 saying how to build it, for the page and its assets', async () => {
    for (const url of ['/portal/', '/portal/assets/app-ABCD1234.js']) {
      const res = await t.app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(503);
      expect(res.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(res.body).toContain('npm run build');
      expectSecurityHeaders(res.headers);
    }
  });
});

describe('GET /portal/v1/catalogue', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await testApp();
  });
  afterAll(async () => t.close());

  it('answers the six event types with schema and sample, to anyone: no key needed', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/portal/v1/catalogue' });
    expect(res.statusCode).toBe(200);
    const body = res.json<{
      event_types: {
        event_type: string;
        description: string;
        schema: { $schema: string };
        sample: { event_type: string };
      }[];
    }>();
    expect(body.event_types.map((e) => e.event_type)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const entry of body.event_types) {
      expect(entry.schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
      expect(entry.sample.event_type).toBe(entry.event_type);
      expect(entry.description).not.toBe('');
    }
  });

  it('refuses query parameters it does not take', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/portal/v1/catalogue?type=x' });
    expect(res.statusCode).toBe(400);
    const body = res.json<{ code: string; error: string }>();
    expect(body.code).toBe('invalid_request');
    expect(body.error).toContain('unknown parameter "type"');
  });

  it('has no other methods and no sub-resources', async () => {
    expect((await t.app.inject({ method: 'POST', url: '/portal/v1/catalogue' })).statusCode).toBe(404);
    expect(
      (await t.app.inject({ method: 'GET', url: '/portal/v1/catalogue/EVENT_TYPE_MACHINE_CREATED' })).statusCode,
    ).toBe(404);
  });

  it('is in the OpenAPI document under the portal tag, with its answer’s schema', async () => {
    const doc = await servedDocument(t.app);
    const op = doc.paths['/portal/v1/catalogue']?.get;
    expect(op?.operationId).toBe('getEventCatalogue');
    expect(op?.tags).toEqual(['portal']);
    expect(op?.security).toEqual([]);
    expect(op?.responses['200']?.content?.['application/json']?.schema).toBeDefined();
  });
});
