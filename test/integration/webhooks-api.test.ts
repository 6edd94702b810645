import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';

const URL_A = 'https://vendor.example.com/hooks/a';

describe('webhook API (/vendors/v1/webhooks)', () => {
  let t: TestApp;
  let key: string;
  let otherVendorKey: string;

  beforeEach(async () => {
    t = await testApp();
    key = await t.keyFor(['vendor'], 'vendor-1');
    otherVendorKey = await t.keyFor(['vendor'], 'vendor-2');
  });
  afterEach(async () => t.close());

  const post = (body: unknown, apiKey = key) =>
    t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': apiKey },
      payload: body as object,
    });
  const list = (apiKey = key) =>
    t.app.inject({ method: 'GET', url: '/vendors/v1/webhooks', headers: { 'x-api-key': apiKey } });
  const patch = (id: string, body: unknown, apiKey = key) =>
    t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': apiKey },
      payload: body as object,
    });
  const del = (id: string, apiKey = key) =>
    t.app.inject({ method: 'DELETE', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': apiKey } });

  async function register(eventType: string = WEBHOOK_EVENT_TYPES[0], extra: object = {}): Promise<string> {
    const res = await post({ event_type: eventType, callback_url: URL_A, ...extra });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  describe('POST', () => {
    it('registers a webhook for each of the six event types and answers 201 {webhook_id}', async () => {
      for (const eventType of WEBHOOK_EVENT_TYPES) {
        const res = await post({ event_type: eventType, callback_url: URL_A, secret: 's3cret' });
        expect(res.statusCode).toBe(201);
        const body = res.json<Record<string, unknown>>();
        expect(Object.keys(body)).toEqual(['webhook_id']);
        expect(body.webhook_id).toMatch(/^[0-9a-f-]{36}$/);
      }
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(6);
    });

    it('generates a whsec_ secret for an hmac webhook registered without one, answers it once in the 201, and lists it', async () => {
      const res = await post({ event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A });
      expect(res.statusCode).toBe(201);
      const body = res.json<{ webhook_id: string; secret: string }>();
      expect(Object.keys(body)).toEqual(['webhook_id', 'secret']);
      expect(body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
      expect(Buffer.from(body.secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
      const [listed] = (await list()).json<{ webhooks: Record<string, unknown>[] }>().webhooks;
      expect(listed).toMatchObject({
        webhook_id: body.webhook_id,
        secret: body.secret,
        signature: 'hmac',
        has_secret: true,
      });
      // Another registration gets a secret of its own.
      const other = (await post({ event_type: WEBHOOK_EVENT_TYPES[1], callback_url: URL_A })).json<{
        secret: string;
      }>();
      expect(other.secret).not.toBe(body.secret);
    });

    it('generates no secret for an ed25519 webhook registered without one (its key pair signs)', async () => {
      const res = await post({ event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A, signature: 'ed25519' });
      expect(res.statusCode).toBe(201);
      expect(Object.keys(res.json())).toEqual(['webhook_id']);
      const [listed] = (await list()).json<{ webhooks: Record<string, unknown>[] }>().webhooks;
      expect(listed).toMatchObject({ signature: 'ed25519', has_secret: false });
      expect(listed).not.toHaveProperty('secret');
    });

    it.each([
      ['missing event_type', { callback_url: URL_A }, 'event_type is required'],
      ['empty event_type', { event_type: '', callback_url: URL_A }, 'event_type must be one of'],
      ['unknown event_type', { event_type: 'EVENT_TYPE_NOPE', callback_url: URL_A }, 'event_type must be one of'],
      ['non-string event_type', { event_type: 7, callback_url: URL_A }, 'event_type must be one of'],
      ['missing callback_url', { event_type: WEBHOOK_EVENT_TYPES[0] }, 'callback_url is required'],
      [
        'empty callback_url',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: '' },
        'callback_url must not be empty',
      ],
      [
        'relative callback_url',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: '/hooks' },
        'callback_url must be a valid absolute URL',
      ],
      [
        'ftp callback_url',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: 'ftp://example.com/x' },
        'callback_url must use http or https',
      ],
      [
        'callback_url with credentials',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: 'https://u:p@example.com/' },
        'must not contain credentials',
      ],
      [
        'callback_url with spaces',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: 'https://example.com/a b' },
        'must not contain whitespace',
      ],
      [
        'too long callback_url',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: `https://example.com/${'a'.repeat(2100)}` },
        'at most 2048',
      ],
      [
        'non-string callback_url',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: 42 },
        'callback_url must be a string',
      ],
      [
        'empty secret',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A, secret: '' },
        'secret must not be empty',
      ],
      [
        'null secret',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A, secret: null },
        'secret must be a string',
      ],
      ['bad whsec_ secret', { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A, secret: 'whsec_!!' }, 'whsec_'],
      [
        'unknown field',
        { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A, callbackUrl: URL_A },
        'unknown field "callbackUrl"',
      ],
      ['array body', [], 'the body must be a JSON object'],
    ])('answers 400 for %s', async (_name, body, message) => {
      const res = await post(body);
      expect(res.statusCode).toBe(400);
      const error = res.json<{ error: string; code: string }>();
      expect(error.code).toBe('invalid_request');
      expect(error.error).toContain(message);
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(0);
    });

    it('answers 400 for malformed JSON, 415 for another content type and 413 for an oversized body', async () => {
      const headers = { 'x-api-key': key, 'content-type': 'application/json' };
      const malformed = await t.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers,
        payload: '{"event_type":',
      });
      expect(malformed.statusCode).toBe(400);
      expect(malformed.json()).toEqual({ error: 'The request body is not valid JSON', code: 'invalid_json' });

      const empty = await t.app.inject({ method: 'POST', url: '/vendors/v1/webhooks', headers, payload: '' });
      expect(empty.statusCode).toBe(400);

      const text = await t.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': key, 'content-type': 'text/plain' },
        payload: 'hi',
      });
      expect(text.statusCode).toBe(415);
      expect(text.json<{ code: string }>().code).toBe('unsupported_media_type');

      const huge = await t.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers,
        payload: JSON.stringify({
          event_type: WEBHOOK_EVENT_TYPES[0],
          callback_url: URL_A,
          secret: 'x'.repeat(2 * 1024 * 1024),
        }),
      });
      expect(huge.statusCode).toBe(413);
      expect(huge.json<{ code: string }>().code).toBe('body_too_large');
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(0);
    });

    it('answers 409 for a second webhook of the same event_type, and allows it for another vendor', async () => {
      const existing = await register();
      const second = await post({ event_type: WEBHOOK_EVENT_TYPES[0], callback_url: 'https://other.example.com/' });
      expect(second.statusCode).toBe(409);
      // The answer names the webhook that has the event type, so the vendor can PATCH it instead.
      expect(second.json()).toEqual({
        error: `A webhook for ${WEBHOOK_EVENT_TYPES[0]} is already registered for this vendor: ${existing}`,
        code: 'webhook_conflict',
        webhook_id: existing,
      });
      const otherVendor = await post({ event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A }, otherVendorKey);
      expect(otherVendor.statusCode).toBe(201);
    });

    it('lets exactly one of 25 racing registrations of the same event_type win', async () => {
      const results = await Promise.all(
        Array.from({ length: 25 }, (_, i) =>
          post({ event_type: WEBHOOK_EVENT_TYPES[1], callback_url: `https://race.example.com/${i}` }),
        ),
      );
      const codes = results.map((r) => r.statusCode).sort();
      expect(codes.filter((c) => c === 201)).toHaveLength(1);
      expect(codes.filter((c) => c === 409)).toHaveLength(24);
      const webhooks = (await list()).json<{ webhooks: { webhook_id: string }[] }>().webhooks;
      expect(webhooks).toHaveLength(1);
      const winner = results.find((r) => r.statusCode === 201)?.json<{ webhook_id: string }>();
      expect(webhooks[0]?.webhook_id).toBe(winner?.webhook_id);
    });
  });

  describe('GET', () => {
    it('lists only the calling vendor’s webhooks, with secret only when one is set', async () => {
      const withSecret = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'topsecret' });
      // Only a webhook that signs with its key pair alone has no secret.
      const withoutSecret = await register(WEBHOOK_EVENT_TYPES[3], { signature: 'ed25519' });
      await post({ event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A }, otherVendorKey);

      const res = await list();
      expect(res.statusCode).toBe(200);
      const webhooks = res.json<{ webhooks: Record<string, unknown>[] }>().webhooks;
      expect(webhooks.map((w) => w.webhook_id)).toEqual([withSecret, withoutSecret]);
      expect(webhooks[0]).toMatchObject({
        webhook_id: withSecret,
        event_type: WEBHOOK_EVENT_TYPES[0],
        callback_url: URL_A,
        secret: 'topsecret',
      });
      expect(webhooks[1]).toMatchObject({
        webhook_id: withoutSecret,
        event_type: WEBHOOK_EVENT_TYPES[3],
        callback_url: URL_A,
      });
      expect(webhooks[1]).not.toHaveProperty('secret');
      expect((await list(otherVendorKey)).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(1);
    });

    it('answers an empty list for a vendor with no webhooks', async () => {
      expect((await list()).json()).toEqual({ webhooks: [] });
    });

    it('stores the secret encrypted: the plaintext is nowhere in Redis', async () => {
      await register(WEBHOOK_EVENT_TYPES[0], { secret: 'plaintext-canary-7f3a' });
      const raw = await t.redis.hvals(t.keys.webhooks.byId);
      expect(raw).toHaveLength(1);
      expect(raw[0]).not.toContain('plaintext-canary-7f3a');
      expect(raw[0]).toMatch(/"secretSealed":"v1\./);
    });
  });

  describe('GET one', () => {
    const get = (id: string, apiKey = key) =>
      t.app.inject({ method: 'GET', url: `/vendors/v1/webhooks/${id}`, headers: { 'x-api-key': apiKey } });

    it('answers the webhook as the list shows it, with its secret when one is set', async () => {
      const withSecret = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'topsecret', rate_limit_per_second: 5 });
      // An Ed25519 webhook registered without a secret has none (an HMAC one gets a generated secret).
      const withoutSecret = await register(WEBHOOK_EVENT_TYPES[3], { signature: 'ed25519' });
      const listed = (await list()).json<{ webhooks: Record<string, unknown>[] }>().webhooks;
      for (const [i, id] of [withSecret, withoutSecret].entries()) {
        const res = await get(id);
        expect(res.statusCode).toBe(200);
        expect(res.json()).toEqual(listed[i]);
      }
      expect((await get(withSecret)).json()).toMatchObject({
        webhook_id: withSecret,
        secret: 'topsecret',
        rate_limit_per_second: 5,
        enabled: true,
      });
      expect((await get(withoutSecret)).json()).not.toHaveProperty('secret');
      expect((await get(withoutSecret)).json()).toMatchObject({ signature: 'ed25519', has_secret: false });
      // An id in capitals is the same webhook.
      expect((await get(withSecret.toUpperCase())).json()).toMatchObject({ webhook_id: withSecret });
    });

    it('answers 400 for a malformed webhook_id, 404 for an unknown one and for another vendor’s', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'topsecret' });
      const malformed = await get('not-a-uuid');
      expect(malformed.statusCode).toBe(400);
      expect(malformed.json()).toEqual({ error: 'Invalid webhook_id format', code: 'invalid_webhook_id' });
      const unknown = await get('00000000-0000-4000-8000-000000000000');
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json()).toEqual({ error: 'Webhook not found', code: 'webhook_not_found' });
      const foreign = await get(id, otherVendorKey);
      expect(foreign.statusCode).toBe(404);
      expect(foreign.body).not.toContain('topsecret');
      await del(id);
      expect((await get(id)).statusCode).toBe(404);
    });
  });

  describe('PATCH', () => {
    it('updates any combination of fields and answers the full resource', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'first' });
      const urlOnly = await patch(id, { callback_url: 'https://new.example.com/h' });
      expect(urlOnly.statusCode).toBe(200);
      expect(urlOnly.json()).toMatchObject({
        webhook_id: id,
        event_type: WEBHOOK_EVENT_TYPES[0],
        callback_url: 'https://new.example.com/h',
        secret: 'first',
      });

      const secretOnly = await patch(id, { secret: 'rotated' });
      expect(secretOnly.json()).toMatchObject({
        webhook_id: id,
        callback_url: 'https://new.example.com/h',
        secret: 'rotated',
      });

      const all = await patch(id, { event_type: WEBHOOK_EVENT_TYPES[5], callback_url: URL_A, secret: 'again' });
      expect(all.json()).toMatchObject({
        webhook_id: id,
        event_type: WEBHOOK_EVENT_TYPES[5],
        callback_url: URL_A,
        secret: 'again',
      });
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks).toEqual([all.json()]);
    });

    it('frees the old event_type when it changes, so it can be registered again', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[0]);
      expect((await patch(id, { event_type: WEBHOOK_EVENT_TYPES[1] })).statusCode).toBe(200);
      await register(WEBHOOK_EVENT_TYPES[0]);
      expect((await post({ event_type: WEBHOOK_EVENT_TYPES[1], callback_url: URL_A })).statusCode).toBe(409);
    });

    it('answers 409 when the new event_type is taken by another of the vendor’s webhooks', async () => {
      const first = await register(WEBHOOK_EVENT_TYPES[0]);
      await register(WEBHOOK_EVENT_TYPES[1]);
      const res = await patch(first, { event_type: WEBHOOK_EVENT_TYPES[1] });
      expect(res.statusCode).toBe(409);
      expect(res.json<{ code: string }>().code).toBe('webhook_conflict');
      const unchanged = (await list()).json<{ webhooks: { webhook_id: string; event_type: string }[] }>().webhooks;
      expect(unchanged.find((w) => w.webhook_id === first)?.event_type).toBe(WEBHOOK_EVENT_TYPES[0]);
    });

    it('accepts an unchanged event_type (no self-conflict)', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[2]);
      expect((await patch(id, { event_type: WEBHOOK_EVENT_TYPES[2] })).statusCode).toBe(200);
    });

    it.each([
      ['an empty body', {}, 'at least one of'],
      ['an empty callback_url', { callback_url: '' }, 'callback_url must not be empty'],
      ['an invalid URL', { callback_url: 'not a url' }, 'callback_url'],
      ['an empty secret', { secret: '' }, 'secret must not be empty'],
      ['an unknown event_type', { event_type: 'EVENT_TYPE_X' }, 'event_type must be one of'],
      ['an unknown field', { paused: true }, 'unknown field "paused"'],
      ['a non-boolean enabled', { enabled: 'yes' }, 'enabled must be true or false'],
    ])('answers 400 for %s and changes nothing', async (_name, body, message) => {
      const id = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'keep' });
      const res = await patch(id, body);
      expect(res.statusCode).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(message);
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks[0]).toMatchObject({
        callback_url: URL_A,
        secret: 'keep',
      });
    });

    it('refuses secret null on an hmac webhook (it would go unsigned) and allows it with a switch to ed25519', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[0], { secret: 'keep' });
      for (const body of [{ secret: null }, { secret: null, signature: 'hmac' }]) {
        const res = await patch(id, body);
        expect(res.statusCode).toBe(400);
        expect(res.json()).toEqual({
          error:
            'Invalid request body: secret null would leave an hmac-signed webhook unsigned; rotate the secret instead, or set signature ed25519 in the same request',
          code: 'invalid_request',
        });
      }
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks[0]).toMatchObject({
        secret: 'keep',
        signature: 'hmac',
      });
      const keysOnly = await patch(id, { secret: null, signature: 'ed25519' });
      expect(keysOnly.statusCode).toBe(200);
      expect(keysOnly.json()).toMatchObject({ signature: 'ed25519', has_secret: false });
      expect(keysOnly.json()).not.toHaveProperty('secret');
    });

    it('generates a secret when an ed25519 webhook without one switches to hmac, and answers it', async () => {
      const id = await register(WEBHOOK_EVENT_TYPES[0], { signature: 'ed25519' });
      const res = await patch(id, { signature: 'hmac' });
      expect(res.statusCode).toBe(200);
      const secret = res.json<{ secret: string }>().secret;
      expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
      expect(res.json()).toMatchObject({ signature: 'hmac', has_secret: true });
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks[0]).toMatchObject({ secret });
      // Given with the switch, the vendor's own secret is kept instead.
      const other = await register(WEBHOOK_EVENT_TYPES[1], { signature: 'ed25519' });
      expect((await patch(other, { signature: 'hmac', secret: 'mine' })).json()).toMatchObject({
        signature: 'hmac',
        secret: 'mine',
      });
    });

    it('answers 400 for a malformed webhook_id, 404 for an unknown one and for another vendor’s', async () => {
      const id = await register();
      const malformed = await patch('not-a-uuid', { callback_url: URL_A });
      expect(malformed.statusCode).toBe(400);
      expect(malformed.json()).toEqual({ error: 'Invalid webhook_id format', code: 'invalid_webhook_id' });
      const unknown = await patch('00000000-0000-4000-8000-000000000000', { callback_url: URL_A });
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json()).toEqual({ error: 'Webhook not found', code: 'webhook_not_found' });
      const foreign = await patch(id, { callback_url: 'https://evil.example.com/' }, otherVendorKey);
      expect(foreign.statusCode).toBe(404);
      expect((await list()).json<{ webhooks: { callback_url: string }[] }>().webhooks[0]?.callback_url).toBe(URL_A);
    });

    it('keeps the uniqueness index consistent under concurrent event_type changes', async () => {
      const ids = [
        await register(WEBHOOK_EVENT_TYPES[0]),
        await register(WEBHOOK_EVENT_TYPES[1]),
        await register(WEBHOOK_EVENT_TYPES[2]),
      ];
      const results = await Promise.all(ids.map((id) => patch(id, { event_type: WEBHOOK_EVENT_TYPES[5] })));
      expect(results.filter((r) => r.statusCode === 200)).toHaveLength(1);
      expect(results.filter((r) => r.statusCode === 409)).toHaveLength(2);
      const types = (await list()).json<{ webhooks: { event_type: string }[] }>().webhooks.map((w) => w.event_type);
      expect(new Set(types).size).toBe(3);
      const index = await t.redis.hgetall(t.keys.webhooks.byVendorType);
      expect(Object.keys(index).sort()).toEqual(types.map((type) => `vendor-1\n${type}`).sort());
    });
  });

  describe('DELETE', () => {
    it('answers 204 with an empty body, then 404; the event_type is free again', async () => {
      const id = await register();
      const res = await del(id);
      expect(res.statusCode).toBe(204);
      expect(res.body).toBe('');
      expect((await del(id)).statusCode).toBe(404);
      expect((await list()).json()).toEqual({ webhooks: [] });
      await register();
    });

    it('answers 400 for a malformed id and 404 for another vendor’s webhook, which survives', async () => {
      const id = await register();
      expect((await del('123')).json()).toEqual({ error: 'Invalid webhook_id format', code: 'invalid_webhook_id' });
      expect((await del(id, otherVendorKey)).statusCode).toBe(404);
      expect((await list()).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(1);
    });
  });
});

describe('callback targets at registration (the SSRF guard)', () => {
  const BLOCKED = [
    ['http://169.254.169.254/', '169.254.169.254 is link-local (metadata)'],
    ['http://10.0.0.1/', '10.0.0.1 is private'],
    ['http://[::1]/', '::1 is loopback'],
    ['http://127.0.0.1:8080/', '127.0.0.1 is loopback'],
    ['http://localhost:8080/hooks', 'localhost always resolves to loopback'],
    ['https://hooks.localhost/', 'hooks.localhost always resolves to loopback'],
  ] as const;

  it('answers 400 naming the field and the reason on POST and PATCH when private targets are not allowed, and stores nothing', async () => {
    const t = await testApp({ allowPrivateTargets: false });
    try {
      const key = await t.keyFor(['vendor'], 'vendor-1');
      const headers = { 'x-api-key': key };
      for (const [url, reason] of BLOCKED) {
        const res = await t.app.inject({
          method: 'POST',
          url: '/vendors/v1/webhooks',
          headers,
          payload: { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: url },
        });
        expect([url, res.statusCode]).toEqual([url, 400]);
        expect(res.json()).toEqual({
          error: `Invalid request body: callback_url must not point at a private or reserved address (${reason})`,
          code: 'invalid_request',
        });
      }
      expect(await t.webhooks.list('vendor-1')).toEqual([]);

      const created = await t.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers,
        payload: { event_type: WEBHOOK_EVENT_TYPES[0], callback_url: URL_A },
      });
      expect(created.statusCode).toBe(201);
      const id = created.json<{ webhook_id: string }>().webhook_id;
      for (const [url, reason] of BLOCKED) {
        const res = await t.app.inject({
          method: 'PATCH',
          url: `/vendors/v1/webhooks/${id}`,
          headers,
          payload: { callback_url: url },
        });
        expect([url, res.statusCode]).toEqual([url, 400]);
        expect(res.json<{ error: string }>().error).toBe(
          `Invalid request body: callback_url must not point at a private or reserved address (${reason})`,
        );
      }
      expect((await t.webhooks.getById(id))?.callbackUrl).toBe(URL_A);
      // A name that is not localhost passes here: what it resolves to is checked at delivery.
      const named = await t.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${id}`,
        headers,
        payload: { callback_url: 'https://hooks.example.net/in' },
      });
      expect(named.statusCode).toBe(200);
    } finally {
      await t.close();
    }
  });

  it('accepts every target when private targets are allowed', async () => {
    const t = await testApp({ allowPrivateTargets: true });
    try {
      const key = await t.keyFor(['vendor'], 'vendor-1');
      for (const [i, [url]] of BLOCKED.entries()) {
        const res = await t.app.inject({
          method: 'POST',
          url: '/vendors/v1/webhooks',
          headers: { 'x-api-key': key },
          payload: { event_type: WEBHOOK_EVENT_TYPES[i], callback_url: url },
        });
        expect([url, res.statusCode]).toEqual([url, 201]);
      }
    } finally {
      await t.close();
    }
  });
});
