import { rmSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { readModelsProjected } from '../helpers/read-models.js';
import { fakePortalBuild } from '../helpers/portal-build.js';
import { servedRoutes } from '../helpers/openapi.js';

/** The long variant (HOOKLINE_LONG_TESTS=1) runs ≥ 10,000 cases in all; the default is a short one. */
const LONG = process.env.HOOKLINE_LONG_TESTS === '1';
const runs = (short: number, long: number) => (LONG ? long : short);
let casesRun = 0;

/** Every answer: never a 5xx, and every error carries a readable `{error}` message. */
function expectClearAnswer(res: { statusCode: number; body: string; headers: Record<string, unknown> }): void {
  expect(res.statusCode).toBeLessThan(500);
  if (res.statusCode >= 400) {
    const body = JSON.parse(res.body) as { error?: unknown; code?: unknown };
    expect(typeof body.error).toBe('string');
    expect((body.error as string).length).toBeGreaterThan(0);
    expect(typeof body.code).toBe('string');
  }
}

const oddStrings = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }),
  fc.constantFrom(
    '',
    ' ',
    '\u0000',
    '\u202e',
    '%',
    '%%',
    '%ZZ',
    '..',
    '../..',
    '%2e%2e%2f',
    '\r\n',
    'null',
    '{}',
    '[]',
    '𝔘𝔫𝔦',
    'a'.repeat(5000),
  ),
);
const oddUrls = fc.oneof(
  fc.webUrl(),
  oddStrings,
  fc.constantFrom(
    'http://',
    'https://[::1',
    'http://0x7f.1/',
    'javascript:alert(1)',
    'http://exa mple.com',
    'https://user:pw@h/',
    `https://h/${'x'.repeat(3000)}`,
    'HTTP://EXAMPLE.COM/',
  ),
);

describe('fuzzing the admin API and ingest (property-based)', () => {
  let t: TestApp;
  let vendorKey: string;
  let adminKey: string;
  let webhookId: string;
  // The portal's routes are fuzzed too: served from a build of their own, whether or not this
  // checkout was built (unbuilt, they answer their documented 503).
  const portalDir = fakePortalBuild();

  beforeAll(async () => {
    t = await testApp({ portalAssetsDir: portalDir });
    vendorKey = await t.keyFor(['vendor'], 'fuzz-vendor');
    adminKey = await t.keyFor(['admin'], 'fuzz-vendor');
    const created = await t.webhooks.create('fuzz-vendor', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/fuzz',
    });
    if (!created.ok) throw new Error('setup');
    webhookId = created.webhook.id;
  });
  /** A portal session of the fuzzed vendor, opened as the page would open it. */
  async function portalCookie(): Promise<{ cookie: string; csrf: string }> {
    const { token } = await t.portalSessions.issue({
      vendorId: 'fuzz-vendor',
      permission: 'manage',
      ttlMs: 3_600_000,
      issuedBy: 'fuzz',
    });
    const opened = await t.portalSessions.exchange(token);
    if (!opened) throw new Error('setup: the portal session did not open');
    return { cookie: `__Host-hookline_portal=${opened.cookieValue}`, csrf: opened.csrfToken };
  }

  afterAll(async () => {
    console.log(`fuzz: ${casesRun} generated cases, none answered 5xx`);
    await t.close();
    rmSync(portalDir, { recursive: true, force: true });
  });

  it('webhook bodies: any JSON, odd strings and URLs → 2xx/4xx with a message, never 5xx', async () => {
    const body = fc.oneof(
      fc.jsonValue(),
      fc.record(
        {
          event_type: fc.oneof(fc.constantFrom(...WEBHOOK_EVENT_TYPES), oddStrings, fc.jsonValue()),
          callback_url: fc.oneof(oddUrls, fc.jsonValue()),
          secret: fc.option(fc.oneof(oddStrings, fc.jsonValue()), { nil: undefined }),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(body, fc.constantFrom('POST', 'PATCH'), async (payload, method) => {
        casesRun += 1;
        const url = method === 'POST' ? '/vendors/v1/webhooks' : `/vendors/v1/webhooks/${webhookId}`;
        const res = await t.app.inject({
          method,
          url,
          headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
          payload: JSON.stringify(payload) ?? 'null',
        });
        expectClearAnswer(res);
        if (res.statusCode === 201)
          await t.webhooks.delete('fuzz-vendor', res.json<{ webhook_id: string }>().webhook_id);
      }),
      { numRuns: runs(600, 4000) },
    );
    // The registry is intact: the fixture webhook still exists and is listed.
    const listed = await t.app.inject({
      method: 'GET',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': vendorKey },
    });
    expect(listed.statusCode).toBe(200);
    expect(listed.json<{ webhooks: { webhook_id: string }[] }>().webhooks.map((w) => w.webhook_id)).toContain(
      webhookId,
    );
  });

  it('raw bodies: malformed JSON, deep nesting, huge and odd content types → 4xx, never 5xx', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const raw = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.integer({ min: 1, max: 20_000 }).map(deep),
      fc.integer({ min: 1, max: 5_000 }).map((n) => `{"a":${'{"a":'.repeat(n)}1${'}'.repeat(n)}}`),
      fc.constantFrom(
        '{',
        '{"event_type":',
        '\u0000',
        '\ufeff{}',
        '{"__proto__":{"admin":true}}',
        '{"constructor":{"prototype":{"x":1}}}',
      ),
    );
    await fc.assert(
      fc.asyncProperty(
        raw,
        fc.constantFrom(
          'application/json',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/json; charset=latin1',
        ),
        async (payload, contentType) => {
          casesRun += 1;
          const res = await t.app.inject({
            method: 'POST',
            url: '/vendors/v1/webhooks',
            headers: { 'x-api-key': vendorKey, 'content-type': contentType },
            payload,
          });
          expectClearAnswer(res);
          expect(res.statusCode).not.toBe(201);
        },
      ),
      { numRuns: runs(400, 2000) },
    );
    const huge = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
      payload: `"${'x'.repeat(2 * 1024 * 1024)}"`,
    });
    expect(huge.statusCode).toBe(413);
    expect({} as Record<string, unknown>).not.toHaveProperty('admin');
  });

  it('path parameters and query strings: anything → 2xx/4xx', async () => {
    const segment = oddStrings.map((s) => encodeURIComponent(s));
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(
          '/rental/v1/tasks/',
          '/rental/v1/machines/agents/',
          '/vendors/v1/webhooks/',
          '/vendors/v1/webhooks/x/deliveries/',
          `/vendors/v1/webhooks/${webhookId}/deliveries/`,
        ),
        segment,
        fc.constantFrom('GET', 'DELETE', 'PATCH', 'POST'),
        async (prefix, id, method) => {
          casesRun += 1;
          const res = await t.app.inject({
            method: method as 'GET',
            url: `${prefix}${id}`,
            headers: { 'x-api-key': adminKey, 'content-type': 'application/json' },
            payload: method === 'GET' || method === 'DELETE' ? undefined : '{}',
          });
          expectClearAnswer(res);
        },
      ),
      { numRuns: runs(500, 2000) },
    );
    const filters = fc.oneof(
      oddStrings,
      fc
        .array(
          fc.tuple(
            fc.oneof(
              fc.constantFrom(
                'gpu_name',
                'cpu_name',
                'memory_size',
                'storage_size',
                'cpu_cores',
                'machine_id',
                'machine_status',
                'status',
              ),
              oddStrings,
            ),
            oddStrings,
          ),
          { maxLength: 25 },
        )
        .map((clauses) => clauses.map(([n, v]) => `${n}:${v}`).join(',')),
    );
    await fc.assert(
      fc.asyncProperty(
        filters,
        fc.oneof(fc.integer(), oddStrings),
        fc.oneof(fc.integer(), oddStrings),
        async (filter, page, pageSize) => {
          casesRun += 1;
          const qs = `filter=${encodeURIComponent(filter)}&page=${encodeURIComponent(String(page))}&page_size=${encodeURIComponent(String(pageSize))}`;
          const res = await t.app.inject({
            method: 'GET',
            url: `/rental/v1/machines?${qs}`,
            headers: { 'x-api-key': adminKey },
          });
          expectClearAnswer(res);
        },
      ),
      { numRuns: runs(500, 2000) },
    );
  });

  it('every route the server has: odd path parameters, query strings, bodies and credentials → 2xx/4xx, never 5xx', async () => {
    // Read from the server's route tree, so a route added tomorrow is fuzzed too.
    const routes = servedRoutes(t.app);
    const cookie = await portalCookie();
    const credentials = fc.constantFrom<Record<string, string>>(
      {},
      { 'x-api-key': adminKey },
      { 'x-api-key': vendorKey },
      { 'x-api-key': 'hk_guess' },
      { cookie: cookie.cookie, 'x-csrf-token': cookie.csrf, 'sec-fetch-site': 'same-origin' },
      { cookie: '__Host-hookline_portal=ps_guess.guess', 'x-csrf-token': 'x' },
    );
    const parameter = fc
      .oneof(fc.constantFrom(webhookId, 'dep-1', `ps_${'0'.repeat(24)}`), fc.uuid(), oddStrings)
      .map((value) => encodeURIComponent(value));
    const query = fc.oneof(
      fc.constant(''),
      fc
        .array(
          fc.tuple(
            fc.oneof(
              fc.constantFrom('limit', 'status', 'cursor', 'vendor_id', 'webhook_id', 'filter', 'page'),
              oddStrings,
            ),
            oddStrings,
          ),
          {
            maxLength: 4,
          },
        )
        .map((pairs) => `?${pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')}`),
    );
    const body = fc.oneof(
      fc.constant(undefined),
      fc.jsonValue().map((value) => JSON.stringify(value) ?? 'null'),
      oddStrings,
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...routes),
        fc.array(parameter, { minLength: 3, maxLength: 3 }),
        query,
        body,
        credentials,
        async (route, ids, qs, payload, headers) => {
          casesRun += 1;
          let n = 0;
          const path = route.url.replace(/:\w+|\*/g, () => ids[n++ % ids.length]!);
          const res = await t.app.inject({
            method: route.method as 'GET',
            url: `${path}${qs}`,
            headers: { ...headers, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
            ...(payload === undefined || route.method === 'GET' ? {} : { payload }),
          });
          expectClearAnswer(res);
        },
      ),
      { numRuns: runs(600, 3000) },
    );
  });

  it('ingest: arbitrary events are accepted or rejected one by one; valid ones still land', async () => {
    const eventsKey = await t.keyFor(['events:write']);
    const event = fc.oneof(
      fc.jsonValue(),
      fc.record(
        {
          event_id: fc.oneof(fc.uuid(), oddStrings),
          event_type: fc.oneof(fc.constantFrom(...WEBHOOK_EVENT_TYPES, 'TASK_UPDATED'), oddStrings),
          vendor_id: fc.oneof(fc.constantFrom('fuzz-vendor'), oddStrings),
          timestamp: fc.oneof(
            fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
            oddStrings,
          ),
          data: fc.jsonValue(),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(event, { minLength: 1, maxLength: 20 }), async (events) => {
        casesRun += 1;
        const res = await t.app.inject({
          method: 'POST',
          url: '/internal/v1/events',
          headers: { 'x-api-key': eventsKey, 'content-type': 'application/json' },
          payload: JSON.stringify({ events }),
        });
        expectClearAnswer(res);
        if (res.statusCode === 202 || res.json<{ code?: string }>().code === 'events_rejected') {
          const answer = res.json<{ results: { status: string; reason?: string }[] }>();
          expect(answer.results).toHaveLength(events.length);
          for (const r of answer.results) if (r.status === 'rejected') expect(r.reason?.length).toBeGreaterThan(0);
        }
      }),
      { numRuns: runs(400, 2500) },
    );
    // A valid machine event among garbage still reaches the read model.
    const valid = {
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      vendor_id: 'fuzz-vendor',
      data: { status: 'available', metadata: { machine_id: 'fuzz-m-1' } },
    };
    const res = await t.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': eventsKey },
      payload: { events: [{ junk: true }, valid, 42] },
    });
    expect(res.json<{ accepted: number; rejected: number }>()).toMatchObject({ accepted: 1, rejected: 2 });
    await readModelsProjected(t.redis, t.keys);
    expect((await t.machines.get('fuzz-m-1'))?.metadata.machine_id).toBe('fuzz-m-1');
  });
});
