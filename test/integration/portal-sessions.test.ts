import { createHash, randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { operationsOf, servedDocument } from '../helpers/openapi.js';

interface Opened {
  session_id: string;
  vendor_id: string;
  permission: string;
  expires_at: string;
  csrf_token: string;
}

/** A browser's view of one portal session: its cookie and CSRF token, after opening the link. */
interface Browser {
  cookie: string;
  csrf: string;
  opened: Opened;
  setCookie: string;
}

describe('vendor portal sessions: magic links, cookie + CSRF, permissions, revocation (real Redis)', () => {
  let t: TestApp | undefined;
  const logged: string[] = [];

  afterEach(async () => {
    await t?.close();
    t = undefined;
    logged.length = 0;
  });

  const start = async (options: { rateLimitPerSecond?: number } = {}) => {
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logged.push(chunk.toString('utf8'));
        done();
      },
    });
    t = await testApp({ logger: pino({ level: 'info' }, sink), ...options });
    return t;
  };

  // A Host header of the caller's choosing: links must never take their address from it.
  const issue = async (app: TestApp, key: string, body: Record<string, unknown>) =>
    app.app.inject({
      method: 'POST',
      url: '/admin/v1/portal/sessions',
      headers: { 'x-api-key': key, host: 'evil.example' },
      payload: body,
    });

  const tokenOf = (url: string) => {
    const match = /#token=(.+)$/.exec(url);
    if (!match) throw new Error(`no token in ${url}`);
    return match[1]!;
  };

  const open = async (app: TestApp, token: string): Promise<Browser> => {
    const res = await app.app.inject({
      method: 'POST',
      url: '/portal/v1/session',
      headers: { 'sec-fetch-site': 'same-origin' },
      payload: { token },
    });
    expect(res.statusCode, res.body).toBe(200);
    const setCookie = String(res.headers['set-cookie']);
    const cookie = /^__Host-hookline_portal=([^;]+)/.exec(setCookie)?.[1];
    if (!cookie) throw new Error(`no cookie in ${setCookie}`);
    const opened = res.json<Opened>();
    return { cookie: `__Host-hookline_portal=${cookie}`, csrf: opened.csrf_token, opened, setCookie };
  };

  /** A request as the portal's page makes it: the cookie, the CSRF header, same-origin. */
  const asPortal = (
    app: TestApp,
    b: Browser,
    method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
    url: string,
    payload?: unknown,
  ) =>
    app.app.inject({
      method,
      url,
      headers: { cookie: b.cookie, 'x-csrf-token': b.csrf, 'sec-fetch-site': 'same-origin' },
      ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
    });

  const linkFor = async (app: TestApp, vendorId: string, permission: string, ttl = '1h') => {
    const admin = await app.keyFor(['portal:issue']);
    const res = await issue(app, admin, { vendor_id: vendorId, permission, ttl });
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{
      session_id: string;
      url: string;
      expires_at: string;
      vendor_id: string;
      permission: string;
      opened: boolean;
      issued_by: string;
    }>();
  };

  it('issues a link with the token in the fragment, opens it once into a __Host- cookie (Secure, Path=/, no Domain, HttpOnly, SameSite=Strict), and never logs the token', async () => {
    const app = await start();
    const before = Date.now();
    const link = await linkFor(app, 'vendor-a', 'manage', '2h');
    // No HOOKLINE_PUBLIC_URL: the API's configured loopback address (HOOKLINE_API_HOST and _PORT's defaults).
    expect(link.url).toMatch(/^http:\/\/127\.0\.0\.1:8080\/portal\/#token=ps_[0-9a-f]{24}\.[A-Za-z0-9_-]{43}$/);
    expect(link).toMatchObject({ vendor_id: 'vendor-a', permission: 'manage', opened: false });
    const expiresMs = Date.parse(link.expires_at) - before;
    expect(expiresMs).toBeGreaterThan(2 * 3_600_000 - 60_000);
    expect(expiresMs).toBeLessThanOrEqual(2 * 3_600_000 + 5_000);

    const token = tokenOf(link.url);
    const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');
    const unopened = JSON.stringify(await app.redis.hgetall(app.keys.portal.session(link.session_id)));
    expect(unopened).toContain(sha256(token.split('.')[1]!));
    expect(unopened).not.toContain(token.split('.')[1]!);
    const b = await open(app, token);
    // Secure even over the test's plain http on loopback, where browsers keep Secure cookies too.
    expect(b.setCookie).toMatch(
      /^__Host-hookline_portal=[^;]+; Path=\/; Secure; HttpOnly; SameSite=Strict; Max-Age=\d+$/,
    );
    expect(b.setCookie).not.toMatch(/Domain=/i);
    expect(b.opened).toMatchObject({ session_id: link.session_id, vendor_id: 'vendor-a', permission: 'manage' });

    // The second use of the same link fails, and so does a made-up one.
    const again = await app.app.inject({ method: 'POST', url: '/portal/v1/session', payload: { token } });
    expect(again.statusCode).toBe(401);
    expect(again.json()).toMatchObject({ code: 'portal_token_invalid' });
    expect(again.headers['set-cookie']).toBeUndefined();
    for (const bad of [`${token.slice(0, -1)}A`, 'nonsense', `${link.session_id}.`, '']) {
      const res = await app.app.inject({ method: 'POST', url: '/portal/v1/session', payload: { token: bad } });
      expect(res.statusCode, bad).toBe(401);
    }

    // The reloaded page reads its session (and CSRF token) with the cookie alone.
    const whoami = await app.app.inject({ method: 'GET', url: '/portal/v1/session', headers: { cookie: b.cookie } });
    expect(whoami.statusCode).toBe(200);
    expect(whoami.json<Opened>().csrf_token).toBe(b.csrf);

    const listed = await app.app.inject({
      method: 'GET',
      url: '/admin/v1/portal/sessions?vendor_id=vendor-a',
      headers: { 'x-api-key': await app.keyFor(['admin']) },
    });
    expect(listed.json<{ sessions: { session_id: string; opened: boolean }[] }>().sessions).toEqual([
      expect.objectContaining({ session_id: link.session_id, opened: true }),
    ]);

    const secretPart = token.split('.')[1]!;
    const cookieSecret = b.cookie.split('.')[1]!;
    // Redis keeps a digest of the cookie (and kept one of the token until it was used), never the values a browser holds.
    const stored = JSON.stringify(await app.redis.hgetall(app.keys.portal.session(link.session_id)));
    expect(stored).toContain(sha256(cookieSecret));
    expect(stored).not.toContain(cookieSecret);
    expect(stored).not.toContain(secretPart);
    const output = logged.join('');
    expect(output).toContain('portal.session_issued');
    expect(output).toContain('portal.session_opened');
    expect(output).not.toContain(secretPart);
    expect(output).not.toContain(cookieSecret);
    expect(output).not.toContain(b.csrf);
  });

  it('links use HOOKLINE_PUBLIC_URL when set, and the cookie is Secure there too', async () => {
    const app = await start();
    const { buildAdminServer } = await import('../../src/admin/server.js');
    const deps = app.adminDeps({
      logger: pino({ level: 'silent' }),
      bodyLimitBytes: 1 << 20,
      isReady: async () => true,
      publicUrl: 'https://hooks.example.com',
    });
    const server = await buildAdminServer(deps);
    try {
      const res = await server.inject({
        method: 'POST',
        url: '/admin/v1/portal/sessions',
        headers: { 'x-api-key': await app.keyFor(['admin']) },
        payload: { vendor_id: 'v1' },
      });
      expect(res.statusCode, res.body).toBe(201);
      const body = res.json<{ url: string; permission: string; expires_at: string }>();
      expect(body.url).toMatch(/^https:\/\/hooks\.example\.com\/portal\/#token=/);
      // Defaults: read, 24 h.
      expect(body.permission).toBe('read');
      expect(Date.parse(body.expires_at) - Date.now()).toBeGreaterThan(23.9 * 3_600_000);
      const opened = await server.inject({
        method: 'POST',
        url: '/portal/v1/session',
        payload: { token: tokenOf(body.url) },
      });
      expect(String(opened.headers['set-cookie'])).toContain('; Secure');
    } finally {
      await server.close();
    }
  });

  /** An admin API over the test app's stores, configured with `extra` (the test app's own is not). */
  const serverWith = async (
    app: TestApp,
    extra: { listenAddress?: { host: string; port: number }; trustProxy?: string[]; publicUrl?: string },
  ) => {
    const { buildAdminServer } = await import('../../src/admin/server.js');
    return buildAdminServer(
      app.adminDeps({
        logger: pino({ level: 'silent' }),
        bodyLimitBytes: 1 << 20,
        isReady: async () => true,
        ...extra,
      }),
    );
  };

  it('without HOOKLINE_PUBLIC_URL, links point at the loopback listen address, never at the Host header; another address needs the setting', async () => {
    const app = await start();
    const admin = await app.keyFor(['admin']);
    // Every header a caller could use to steer the link elsewhere.
    const headers = {
      'x-api-key': admin,
      host: 'evil.example',
      'x-forwarded-host': 'evil.example',
      'x-forwarded-proto': 'https',
    };
    const mint = (server: Awaited<ReturnType<typeof serverWith>>) =>
      server.inject({
        method: 'POST',
        url: '/admin/v1/portal/sessions',
        headers,
        payload: { vendor_id: 'vendor-links' },
      });
    const cases: [{ host: string; port: number }, string][] = [
      [{ host: '127.0.0.1', port: 8080 }, 'http://127.0.0.1:8080'],
      [{ host: '::1', port: 9000 }, 'http://[::1]:9000'],
      [{ host: 'localhost', port: 8080 }, 'http://localhost:8080'],
    ];
    for (const [listenAddress, base] of cases) {
      const server = await serverWith(app, { listenAddress, trustProxy: ['loopback'] });
      try {
        const res = await mint(server);
        expect(res.statusCode, res.body).toBe(201);
        expect(res.json<{ url: string }>().url.startsWith(`${base}/portal/#token=ps_`), res.body).toBe(true);
      } finally {
        await server.close();
      }
    }
    // Listening elsewhere, a link would travel over the network in clear, or point nowhere: none is minted.
    const before = (await app.portalSessions.list('vendor-links')).length;
    for (const host of ['0.0.0.0', '::', '10.1.2.3', 'api.internal']) {
      const server = await serverWith(app, { listenAddress: { host, port: 8080 } });
      try {
        const res = await mint(server);
        expect(res.statusCode, host).toBe(409);
        expect(res.json(), host).toMatchObject({ code: 'public_url_required' });
        expect(res.json<{ error: string }>().error).toContain('HOOKLINE_PUBLIC_URL');
      } finally {
        await server.close();
      }
    }
    expect(await app.portalSessions.list('vendor-links')).toHaveLength(before);
  });

  it('mints no link for a plain-http HOOKLINE_PUBLIC_URL off loopback, where browsers would drop the Secure cookie', async () => {
    const app = await start();
    const admin = await app.keyFor(['admin']);
    const cases: [string, number][] = [
      ['http://hooks.internal:8080', 409],
      ['http://10.1.2.3', 409],
      ['http://localhost:8080', 201],
      ['http://127.0.0.1:8080', 201],
      ['http://[::1]:8080', 201],
      ['https://hooks.example.com', 201],
    ];
    for (const [publicUrl, status] of cases) {
      const server = await serverWith(app, { publicUrl });
      try {
        const res = await server.inject({
          method: 'POST',
          url: '/admin/v1/portal/sessions',
          headers: { 'x-api-key': admin },
          payload: { vendor_id: 'vendor-http' },
        });
        expect(res.statusCode, publicUrl).toBe(status);
        if (status === 201)
          expect(res.json<{ url: string }>().url.startsWith(`${publicUrl}/portal/#token=`)).toBe(true);
        else {
          expect(res.json()).toMatchObject({ code: 'public_url_required' });
          expect(res.json<{ error: string }>().error).toContain('https');
        }
      } finally {
        await server.close();
      }
    }
  });

  it('believes X-Forwarded-Proto only from a proxy HOOKLINE_TRUST_PROXY names (HSTS); the cookie is Secure whatever the proxy says', async () => {
    const app = await start();
    const cases: [string[] | undefined, boolean][] = [
      [undefined, false],
      [['10.0.0.0/8'], false],
      [['127.0.0.1'], true],
      [['loopback'], true],
    ];
    for (const [trustProxy, https] of cases) {
      const server = await serverWith(app, trustProxy === undefined ? {} : { trustProxy });
      try {
        const token = tokenOf((await linkFor(app, 'vendor-a', 'read')).url);
        // app.inject connects from 127.0.0.1: a proxy on loopback, trusted or not.
        const res = await server.inject({
          method: 'POST',
          url: '/portal/v1/session',
          headers: { 'x-forwarded-proto': 'https', 'x-forwarded-for': '203.0.113.9' },
          payload: { token },
        });
        expect(res.statusCode, res.body).toBe(200);
        expect(res.headers['strict-transport-security'] !== undefined, JSON.stringify(trustProxy)).toBe(https);
        expect(String(res.headers['set-cookie'])).toContain('; Secure;');
      } finally {
        await server.close();
      }
    }
  });

  it('only portal:issue or admin keys issue links, and bad input answers 400 naming the field', async () => {
    const app = await start();
    const vendorKey = await app.keyFor(['vendor'], 'vendor-a');
    expect((await issue(app, vendorKey, { vendor_id: 'vendor-a' })).statusCode).toBe(403);
    expect(
      (await app.app.inject({ method: 'POST', url: '/admin/v1/portal/sessions', payload: { vendor_id: 'v' } }))
        .statusCode,
    ).toBe(401);
    const issuer = await app.keyFor(['portal:issue']);
    const cases: [Record<string, unknown>, RegExp][] = [
      [{}, /vendor_id/],
      [{ vendor_id: 'has space' }, /vendor_id/],
      [{ vendor_id: 'v', permission: 'admin' }, /permission/],
      [{ vendor_id: 'v', ttl: '1m' }, /ttl must be from 5m to 7d/],
      [{ vendor_id: 'v', ttl: '8d' }, /ttl must be from 5m to 7d/],
      [{ vendor_id: 'v', ttl: 'forever' }, /ttl must be a duration/],
      [{ vendor_id: 'v', extra: 1 }, /extra/],
    ];
    for (const [body, message] of cases) {
      const res = await issue(app, issuer, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json<{ error: string }>().error).toMatch(message);
    }
    const bad = await app.app.inject({
      method: 'DELETE',
      url: '/admin/v1/portal/sessions/not-a-session',
      headers: { 'x-api-key': issuer },
    });
    expect(bad.json()).toMatchObject({ code: 'invalid_session_id' });
    const missing = await app.app.inject({
      method: 'DELETE',
      url: `/admin/v1/portal/sessions/ps_${'0'.repeat(24)}`,
      headers: { 'x-api-key': issuer },
    });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toMatchObject({ code: 'portal_session_not_found' });
  });

  it('a session sees only its vendor, needs the CSRF header on every request, and refuses cross-site requests', async () => {
    const app = await start();
    const keyA = await app.keyFor(['vendor'], 'vendor-a');
    const keyB = await app.keyFor(['vendor'], 'vendor-b');
    const created = await app.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': keyA },
      payload: {
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: 'http://127.0.0.1:9/a',
        secret: 'a-secret-of-vendor-a',
      },
    });
    const otherB = await app.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': keyB },
      payload: { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'http://127.0.0.1:9/b' },
    });
    const webhookA = created.json<{ webhook_id: string }>().webhook_id;
    const webhookB = otherB.json<{ webhook_id: string }>().webhook_id;
    const b = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'read')).url));

    const list = await asPortal(app, b, 'GET', '/vendors/v1/webhooks');
    expect(list.statusCode).toBe(200);
    const hooks = list.json<{ webhooks: { webhook_id: string; secret?: string }[] }>().webhooks;
    expect(hooks.map((w) => w.webhook_id)).toEqual([webhookA]);
    // A read session never receives the secret.
    expect(hooks[0]).not.toHaveProperty('secret');
    expect(list.body).not.toContain('a-secret-of-vendor-a');
    const one = await asPortal(app, b, 'GET', `/vendors/v1/webhooks/${webhookA}`);
    expect(one.json()).toEqual(hooks[0]);
    expect(one.body).not.toContain('a-secret-of-vendor-a');
    expect((await asPortal(app, b, 'GET', `/vendors/v1/webhooks/${webhookB}`)).statusCode).toBe(404);
    expect((await asPortal(app, b, 'GET', `/vendors/v1/webhooks/${webhookB}/deliveries`)).statusCode).toBe(404);

    // The cookie without the CSRF token, with a wrong one, or from another site, is refused.
    const noCsrf = await app.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { cookie: b.cookie } });
    expect(noCsrf.statusCode).toBe(403);
    expect(noCsrf.json()).toMatchObject({ code: 'csrf_failed' });
    const wrong = await app.app.inject({
      method: 'GET',
      url: '/vendors/v1/webhooks',
      headers: { cookie: b.cookie, 'x-csrf-token': `${b.csrf.slice(0, -1)}x` },
    });
    expect(wrong.statusCode).toBe(403);
    const crossSite = await app.app.inject({
      method: 'GET',
      url: '/vendors/v1/webhooks',
      headers: { cookie: b.cookie, 'x-csrf-token': b.csrf, 'sec-fetch-site': 'cross-site' },
    });
    expect(crossSite.statusCode).toBe(403);
    const crossOpen = await app.app.inject({
      method: 'POST',
      url: '/portal/v1/session',
      headers: { 'sec-fetch-site': 'cross-site' },
      payload: { token: tokenOf((await linkFor(app, 'vendor-a', 'read')).url) },
    });
    expect(crossOpen.json()).toMatchObject({ code: 'csrf_failed' });

    // Routes that take API keys only (ingest, operator, the machine listing) ignore the cookie.
    for (const url of ['/admin/v1/webhooks', '/rental/v1/machines']) {
      const res = await asPortal(app, b, 'GET', url);
      expect(res.statusCode, url).toBe(401);
    }
    const ingest = await asPortal(app, b, 'POST', '/internal/v1/events', {
      event_id: randomUUID(),
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      vendor_id: 'vendor-a',
      data: {},
    });
    expect(ingest.statusCode).toBe(401);
  });

  it('answers the session and its CSRF token to this origin only: the browser’s cross-site, same-site or typed-in request is refused', async () => {
    const app = await start();
    const b = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'read')).url));
    for (const site of ['cross-site', 'same-site', 'none']) {
      const res = await app.app.inject({
        method: 'GET',
        url: '/portal/v1/session',
        headers: { cookie: b.cookie, 'sec-fetch-site': site },
      });
      expect(res.statusCode, site).toBe(403);
      expect(res.json(), site).toMatchObject({ code: 'csrf_failed' });
      expect(res.body, site).not.toContain(b.csrf);
    }
    // The portal's own fetch, and a client that is not a browser (no Sec-Fetch-Site), read it.
    for (const headers of [{ 'sec-fetch-site': 'same-origin' }, {}]) {
      const res = await app.app.inject({
        method: 'GET',
        url: '/portal/v1/session',
        headers: { cookie: b.cookie, ...headers },
      });
      expect(res.statusCode, JSON.stringify(headers)).toBe(200);
      expect(res.json<Opened>().csrf_token).toBe(b.csrf);
    }
  });

  /** The operations the portal's cookie opens, as the OpenAPI document (generated from the routes' authorizers) names them. */
  const cookieOperations = async (app: TestApp) =>
    operationsOf(await servedDocument(app.app))
      .filter(
        ([, op]) =>
          op.security?.some((scheme) => typeof scheme === 'object' && scheme !== null && 'portalSession' in scheme) ===
          true,
      )
      .map(([name]) => name);

  /** `METHOD /path/{param}` as a request: the webhook's id where it goes, a fresh UUID for any other id. */
  const requestOf = (operation: string, webhookId: string) => {
    const [method, path] = operation.split(' ') as ['GET' | 'POST' | 'PATCH' | 'DELETE', string];
    return { method, url: path.replace('{webhook_id}', webhookId).replace(/\{\w+\}/g, () => randomUUID()) };
  };

  it('enforces each permission on the server, on every route the cookie opens: read views, replay adds replays and tests, manage adds changes', async () => {
    const app = await start();
    const keyA = await app.keyFor(['vendor'], 'vendor-a');
    const created = await app.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': keyA },
      payload: {
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: 'http://127.0.0.1:9/a',
        secret: 'a-secret-of-vendor-a',
      },
    });
    const webhookId = created.json<{ webhook_id: string }>().webhook_id;
    const sessions = {
      read: await open(app, tokenOf((await linkFor(app, 'vendor-a', 'read')).url)),
      replay: await open(app, tokenOf((await linkFor(app, 'vendor-a', 'replay')).url)),
      manage: await open(app, tokenOf((await linkFor(app, 'vendor-a', 'manage')).url)),
    };
    const calls: { operation: string; needs: 'read' | 'replay' | 'manage'; body?: unknown }[] = [
      { operation: 'GET /vendors/v1/webhooks', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/deliveries', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/deliveries/{delivery_id}', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/dead-letters', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/stats', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/public-keys', needs: 'read' },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/filter-test', needs: 'read', body: {} },
      { operation: 'GET /rental/v1/tasks/{task_id}', needs: 'read' },
      { operation: 'GET /vendors/v1/webhooks/{webhook_id}/events', needs: 'read' },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/test', needs: 'replay', body: {} },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay', needs: 'replay' },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/replay', needs: 'replay' },
      { operation: 'POST /vendors/v1/tasks/{task_id}/cancel', needs: 'replay' },
      {
        operation: 'POST /vendors/v1/webhooks/{webhook_id}/replay',
        needs: 'replay',
        body: { since: '2026-01-01T00:00:00Z', dry_run: true },
      },
      { operation: 'PATCH /vendors/v1/webhooks/{webhook_id}', needs: 'manage', body: { enabled: true } },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/rotate-secret', needs: 'manage' },
      { operation: 'POST /vendors/v1/webhooks/{webhook_id}/rotate-signing-key', needs: 'manage' },
      {
        operation: 'POST /vendors/v1/webhooks',
        needs: 'manage',
        body: { event_type: 'EVENT_TYPE_MACHINE_UPDATED', callback_url: 'http://127.0.0.1:9/u' },
      },
    ];
    // Deleting ends the webhook the others use: it is checked last, below.
    const DELETE_WEBHOOK = 'DELETE /vendors/v1/webhooks/{webhook_id}';
    // Every route the cookie opens has a row (the portal's own session routes need no permission).
    const covered = [
      ...calls.map((call) => call.operation),
      DELETE_WEBHOOK,
      'GET /portal/v1/session',
      'DELETE /portal/v1/session',
    ];
    expect((await cookieOperations(app)).sort()).toEqual(covered.sort());

    const order = ['read', 'replay', 'manage'] as const;
    for (const call of calls) {
      const { method, url } = requestOf(call.operation, webhookId);
      for (const held of order) {
        const res = await asPortal(app, sessions[held], method, url, call.body);
        const allowed = order.indexOf(held) >= order.indexOf(call.needs);
        if (allowed)
          expect([200, 201, 202, 404, 409], `${call.operation} as ${held}: ${res.body}`).toContain(res.statusCode);
        else {
          expect(res.statusCode, `${call.operation} as ${held}`).toBe(403);
          expect(res.json(), `${call.operation} as ${held}`).toMatchObject({ code: 'portal_permission' });
        }
      }
    }
    // Only manage sees the secret (the rotation above replaced it).
    const managed = await asPortal(app, sessions.manage, 'GET', '/vendors/v1/webhooks');
    expect(
      managed
        .json<{ webhooks: { webhook_id: string; secret?: string }[] }>()
        .webhooks.find((w) => w.webhook_id === webhookId)?.secret,
    ).toMatch(/^whsec_/);
    expect(
      (await asPortal(app, sessions.manage, 'GET', `/vendors/v1/webhooks/${webhookId}`)).json<{ secret?: string }>()
        .secret,
    ).toMatch(/^whsec_/);
    expect(
      (await asPortal(app, sessions.replay, 'GET', `/vendors/v1/webhooks/${webhookId}`)).json(),
    ).not.toHaveProperty('secret');
    for (const held of ['read', 'replay'] as const) {
      const del = await asPortal(app, sessions[held], 'DELETE', `/vendors/v1/webhooks/${webhookId}`);
      expect(del.statusCode, held).toBe(403);
    }
    expect((await asPortal(app, sessions.manage, 'DELETE', `/vendors/v1/webhooks/${webhookId}`)).statusCode).toBe(204);
  });

  it('every route the cookie opens refuses it without the CSRF token or from another site; every route that takes keys only ignores it', async () => {
    const app = await start();
    const b = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'manage')).url));
    const takesCookie = new Set(await cookieOperations(app));
    let checked = 0;
    for (const [operation, op] of operationsOf(await servedDocument(app.app))) {
      // Public routes take no credential at all.
      if (op.security !== undefined && op.security.length === 0) continue;
      const { method, url } = requestOf(operation, randomUUID());
      const send = (headers: Record<string, string>) => app.app.inject({ method, url, headers });
      checked += 1;
      if (!takesCookie.has(operation)) {
        // The portal's full credentials open nothing here.
        const res = await send({ cookie: b.cookie, 'x-csrf-token': b.csrf, 'sec-fetch-site': 'same-origin' });
        expect([operation, res.statusCode]).toEqual([operation, 401]);
        continue;
      }
      const crossSite = await send({ cookie: b.cookie, 'x-csrf-token': b.csrf, 'sec-fetch-site': 'same-site' });
      expect([operation, crossSite.statusCode, crossSite.json<{ code: string }>().code]).toEqual([
        operation,
        403,
        'csrf_failed',
      ]);
      const noToken = await send({ cookie: b.cookie, 'sec-fetch-site': 'same-origin' });
      // The one exception: a reloaded page learns its token here.
      const expected = operation === 'GET /portal/v1/session' ? 200 : 403;
      expect([operation, noToken.statusCode]).toEqual([operation, expected]);
    }
    expect(checked).toBe(
      operationsOf(await servedDocument(app.app)).filter(
        ([, op]) => op.security === undefined || op.security.length > 0,
      ).length,
    );
    expect(takesCookie.size).toBeGreaterThanOrEqual(18);
  });

  it('revoking one session, or every session of a vendor, ends access at once; signing out clears the cookie', async () => {
    const app = await start();
    const issuer = await app.keyFor(['portal:issue']);
    const one = await linkFor(app, 'vendor-a', 'read');
    const b1 = await open(app, tokenOf(one.url));
    expect((await asPortal(app, b1, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(200);
    const revoked = await app.app.inject({
      method: 'DELETE',
      url: `/admin/v1/portal/sessions/${one.session_id}`,
      headers: { 'x-api-key': issuer },
    });
    expect(revoked.statusCode).toBe(204);
    expect((await asPortal(app, b1, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(401);
    expect(
      (await app.app.inject({ method: 'GET', url: '/portal/v1/session', headers: { cookie: b1.cookie } })).statusCode,
    ).toBe(401);

    // Every session of vendor-a: an opened one and a link not yet opened; vendor-b's survives.
    const opened = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'manage')).url));
    const unopened = await linkFor(app, 'vendor-a', 'read');
    const other = await open(app, tokenOf((await linkFor(app, 'vendor-b', 'read')).url));
    const all = await app.app.inject({
      method: 'DELETE',
      url: '/admin/v1/portal/sessions?vendor_id=vendor-a',
      headers: { 'x-api-key': issuer },
    });
    expect(all.json()).toEqual({ revoked: 2 });
    expect((await asPortal(app, opened, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(401);
    expect(
      (await app.app.inject({ method: 'POST', url: '/portal/v1/session', payload: { token: tokenOf(unopened.url) } }))
        .statusCode,
    ).toBe(401);
    expect((await asPortal(app, other, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(200);

    // Signing out needs the CSRF token, then revokes the session and clears the cookie.
    const noCsrf = await app.app.inject({
      method: 'DELETE',
      url: '/portal/v1/session',
      headers: { cookie: other.cookie },
    });
    expect(noCsrf.statusCode).toBe(403);
    const out = await asPortal(app, other, 'DELETE', '/portal/v1/session');
    expect(out.statusCode).toBe(204);
    expect(String(out.headers['set-cookie'])).toMatch(/^__Host-hookline_portal=; Path=\/; Secure; .*Max-Age=0/);
    expect((await asPortal(app, other, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(401);
  });

  it('an expired link or session stops working', async () => {
    let now = Date.now();
    const app = await start();
    const { RedisPortalSessions } = await import('../../src/store/portal-sessions.js');
    const clocked = new RedisPortalSessions(app.redis, app.keys, () => now);
    const issued = await clocked.issue({
      vendorId: 'vendor-a',
      permission: 'read',
      ttlMs: 5 * 60_000,
      issuedBy: 'test',
    });
    const unopened = await clocked.issue({
      vendorId: 'vendor-a',
      permission: 'read',
      ttlMs: 5 * 60_000,
      issuedBy: 'test',
    });
    const opened = await clocked.exchange(issued.token);
    expect(opened).toBeDefined();
    expect(await clocked.authenticate(opened!.cookieValue)).toBeDefined();
    now += 5 * 60_000 + 1;
    expect(await clocked.authenticate(opened!.cookieValue)).toBeUndefined();
    expect(await clocked.exchange(unopened.token)).toBeUndefined();
    // Redis expires the session's hash itself, so nothing outlives its session.
    const ttlMs = await app.redis.pttl(app.keys.portal.session(unopened.session.id));
    expect(ttlMs).toBeGreaterThan(0);
    expect(ttlMs).toBeLessThanOrEqual(5 * 60_000);
  });

  it('two tabs opening one link at the same moment: exactly one gets a session', async () => {
    const app = await start();
    const link = await linkFor(app, 'vendor-a', 'read');
    const token = tokenOf(link.url);
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        app.app.inject({ method: 'POST', url: '/portal/v1/session', payload: { token } }),
      ),
    );
    expect(answers.map((a) => a.statusCode).sort()).toEqual([200, 401, 401, 401, 401, 401, 401, 401]);
  });

  it('a session’s requests count against the per-key request limit, as a key’s do, separately from other sessions', async () => {
    const app = await start({ rateLimitPerSecond: 3 });
    const busy = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'read')).url));
    const quiet = await open(app, tokenOf((await linkFor(app, 'vendor-a', 'read')).url));
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => asPortal(app, busy, 'GET', '/vendors/v1/webhooks')),
    );
    const limited = answers.filter((a) => a.statusCode === 429);
    // Eight at once, three a second: whichever second boundary they straddle, most are refused.
    expect(limited.length).toBeGreaterThanOrEqual(2);
    expect(limited[0]!.headers['retry-after']).toBe('1');
    expect(limited[0]!.json<{ error: string }>().error).toContain('for this session');
    expect((await asPortal(app, quiet, 'GET', '/vendors/v1/webhooks')).statusCode).toBe(200);
  });
});
