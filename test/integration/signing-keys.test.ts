import { createPublicKey, verify } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { startDeliveryWorld, stopDeliveryWorld, type DeliveryWorld } from '../helpers/delivery-world.js';
import { machineEvent } from '../helpers/events.js';
import type { ReceivedRequest, TestReceiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

const VENDOR = 'vendor-ed25519';
const WHSEC = `whsec_${Buffer.from('ed25519-test-secret-of-32-bytes!').toString('base64')}`;

interface PublicKeyView {
  kid: string;
  public_key: string;
  jwk: { kty: string; crv: string; x: string; kid: string };
  created_at: string;
  signs_from: string;
  expires_at: string | null;
}

/** An opaque kid: 128 bits of base64url, nothing of any id. */
const OPAQUE_KID = /^[A-Za-z0-9_-]{22}$/;

/**
 * Verifies a received request's v1a entries with node:crypto alone: true for each entry, in order,
 * when some of the given JWKs verifies it over `{webhook-id}.{webhook-timestamp}.{body}`.
 */
function v1aVerdicts(request: ReceivedRequest, jwks: readonly { kty: string; crv: string; x: string }[]): boolean[] {
  const headers = request.headers as Record<string, string>;
  const content = Buffer.from(`${headers['webhook-id']}.${headers['webhook-timestamp']}.${request.body}`, 'utf8');
  const keys = jwks.map((jwk) => createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: 'jwk' }));
  return headers['webhook-signature']!.split(' ')
    .filter((entry) => entry.startsWith('v1a,'))
    .map((entry) => keys.some((key) => verify(null, content, key, Buffer.from(entry.slice(4), 'base64'))));
}

describe('Ed25519 signatures (v1a) with public-key discovery (real Redis, real receiver)', () => {
  let world: DeliveryWorld;
  let t: TestApp;
  let receiver: TestReceiver;
  let key: string;
  const logged: string[] = [];
  beforeEach(async () => {
    logged.length = 0;
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logged.push(chunk.toString('utf8'));
        done();
      },
    });
    world = await startDeliveryWorld(VENDOR, { logger: pino({ level: 'debug' }, sink) });
    ({ t, receiver, key } = world);
  });
  afterEach(async () => stopDeliveryWorld(world));

  const call = (
    method: 'GET' | 'POST' | 'PATCH',
    url: string,
    payload?: object,
    headers: Record<string, string> = { 'x-api-key': key },
  ) => t.app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload }) });

  async function register(eventType: string, path: string, extra: object): Promise<string> {
    const res = await call('POST', '/vendors/v1/webhooks', {
      event_type: eventType,
      callback_url: `${receiver.base}${path}`,
      ...extra,
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  async function publicKeys(webhookId: string): Promise<PublicKeyView[]> {
    const res = await call('GET', `/vendors/v1/webhooks/${webhookId}/public-keys`);
    expect(res.statusCode).toBe(200);
    return res.json<{ keys: PublicKeyView[] }>().keys;
  }

  async function deliverOne(path: string): Promise<ReceivedRequest> {
    const before = receiver.at(path).length;
    const results = await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
    expect(results.map((r) => r.status)).toEqual(['accepted']);
    await waitFor(() => receiver.at(path).length > before, 10_000, `a delivery to ${path}`);
    return receiver.at(path)[before]!;
  }

  it('a webhook without a secret gets v1a only, verified with node:crypto and the keys from the API and the key set', async () => {
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/keys-only', { signature: 'ed25519' });
    const listed = await call('GET', '/vendors/v1/webhooks');
    expect(listed.json<{ webhooks: { signature: string }[] }>().webhooks[0]!.signature).toBe('ed25519');
    const keys = await publicKeys(id);
    expect(keys).toHaveLength(1);
    expect(keys[0]).toMatchObject({
      expires_at: null,
      signs_from: keys[0]!.created_at,
      jwk: { kty: 'OKP', crv: 'Ed25519', kid: keys[0]!.kid },
    });
    expect(keys[0]!.kid).toMatch(OPAQUE_KID);
    expect(keys[0]!.public_key).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);

    const request = await deliverOne('/keys-only');
    expect(String(request.headers['webhook-signature'])).toMatch(/^v1a,[A-Za-z0-9+/]{86}==$/);
    expect(request.headers['x-webhook-signature']).toBeUndefined();
    expect(v1aVerdicts(request, [keys[0]!.jwk])).toEqual([true]);

    // The key set: no key needed, cacheable, the webhook's key under its kid, and 304 on its ETag.
    const set = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
    expect(set.statusCode).toBe(200);
    expect(set.headers['cache-control']).toBe('public, max-age=300');
    const jwks = set.json<{ keys: { kid: string; kty: string; crv: string; x: string }[] }>().keys;
    expect(jwks).toContainEqual(keys[0]!.jwk);
    const again = await t.app.inject({
      method: 'GET',
      url: '/.well-known/jwks.json',
      headers: { 'if-none-match': String(set.headers.etag) },
    });
    expect(again.statusCode).toBe(304);
    // A receiver asks for its own webhook's keys.
    const narrowed = await t.app.inject({ method: 'GET', url: `/.well-known/jwks.json?webhook_id=${id}` });
    const mine = narrowed.json<{ keys: { kid: string; kty: string; crv: string; x: string }[] }>().keys;
    expect(mine).toEqual([keys[0]!.jwk]);
    expect(v1aVerdicts(request, mine)).toEqual([true]);
    expect((await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json?webhook_id=nope' })).statusCode).toBe(400);

    // No private key leaves the engine, and Redis holds it sealed.
    const raw = (await t.redis.hget(t.keys.webhooks.byId, id)) ?? '';
    expect(raw).toContain('privateSealed');
    const everything = [listed.body, JSON.stringify(keys), set.body].join('\n');
    expect(everything).not.toMatch(/private/i);
    const stored = await t.webhooks.get(VENDOR, id);
    expect(raw).not.toContain(stored!.signingKeys[0]!.privateKey);
    // Nor does any log line of the API or the worker (at debug), which did log the delivery.
    expect(logged.join('')).toContain(id);
    expect(logged.join('')).not.toContain(stored!.signingKeys[0]!.privateKey);
  });

  it('with a secret too: v1, v1a and the legacy HMAC; a rotated key is listed at once and signs only after the lead; hmac drops the keys', async () => {
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/both', { signature: 'ed25519', secret: WHSEC });
    const first = await publicKeys(id);
    const before = await deliverOne('/both');
    expect(
      String(before.headers['webhook-signature'])
        .split(' ')
        .map((e) => e.split(',')[0]),
    ).toEqual(['v1', 'v1a']);
    expect(String(before.headers['x-webhook-signature'])).toMatch(/^sha256=/);

    // Read before the rotation: the set this process serves is then a reading from before it.
    expect((await t.app.inject({ method: 'GET', url: `/.well-known/jwks.json?webhook_id=${id}` })).json()).toEqual({
      keys: [first[0]!.jwk],
    });
    const rotatedAtMs = Date.now();
    const rotated = await call('POST', `/vendors/v1/webhooks/${id}/rotate-signing-key`);
    expect(rotated.statusCode).toBe(200);
    const [fresh, replaced] = rotated.json<{ keys: PublicKeyView[] }>().keys;
    expect(fresh!.kid).toMatch(OPAQUE_KID);
    expect(fresh!.kid).not.toBe(first[0]!.kid);
    expect(replaced).toMatchObject({ kid: first[0]!.kid, public_key: first[0]!.public_key });
    // The new key signs ten minutes from now; the replaced one until the overlap after that has passed.
    const signsFromMs = Date.parse(fresh!.signs_from);
    expect(signsFromMs - rotatedAtMs).toBeGreaterThanOrEqual(10 * 60_000 - 1_000);
    expect(signsFromMs - rotatedAtMs).toBeLessThanOrEqual(10 * 60_000 + 5_000);
    expect(Date.parse(replaced!.expires_at!) - signsFromMs).toBe(24 * 3_600_000);
    expect((await publicKeys(id)).map((k) => k.kid)).toEqual([fresh!.kid, replaced!.kid]);

    // Listed before it signs: the key set has the new key at once, while deliveries carry only the old key's signature.
    const set = await t.app.inject({ method: 'GET', url: `/.well-known/jwks.json?webhook_id=${id}` });
    expect(
      set
        .json<{ keys: { kid: string }[] }>()
        .keys.map((k) => k.kid)
        .sort(),
    ).toEqual([fresh!.kid, replaced!.kid].sort());
    const during = await deliverOne('/both');
    expect(v1aVerdicts(during, [replaced!.jwk])).toEqual([true]);
    expect(v1aVerdicts(during, [fresh!.jwk])).toEqual([false]);

    // Back to hmac: no v1a, no keys; rotating a key then answers 409.
    const back = await call('PATCH', `/vendors/v1/webhooks/${id}`, { signature: 'hmac' });
    expect(back.statusCode).toBe(200);
    expect(back.json()).toMatchObject({ signature: 'hmac' });
    await waitFor(async () => (await t.webhooks.get(VENDOR, id))?.signingKeys.length === 0);
    expect(await publicKeys(id)).toEqual([]);
    // Workers cache webhooks for up to 2 s: wait until a delivery shows the change.
    const after = await waitFor(async () => {
      const request = await deliverOne('/both');
      return String(request.headers['webhook-signature']).includes('v1a,') ? undefined : request;
    }, 15_000);
    expect(String(after.headers['webhook-signature'])).toMatch(/^v1,\S+$/);
    const refused = await call('POST', `/vendors/v1/webhooks/${id}/rotate-signing-key`);
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({ code: 'webhook_not_ed25519' });
  });

  it('moving from a secret to keys without a gap: add ed25519, then PATCH secret null leaves v1a alone', async () => {
    const id = await register('EVENT_TYPE_MACHINE_CREATED', '/moving', { secret: WHSEC });
    expect(String((await deliverOne('/moving')).headers['webhook-signature'])).toMatch(/^v1,\S+$/);
    expect((await call('PATCH', `/vendors/v1/webhooks/${id}`, { signature: 'ed25519' })).statusCode).toBe(200);
    const keys = await publicKeys(id);
    const both = await waitFor(async () => {
      const request = await deliverOne('/moving');
      return String(request.headers['webhook-signature']).includes('v1a,') ? request : undefined;
    }, 15_000);
    expect(
      String(both.headers['webhook-signature'])
        .split(' ')
        .map((e) => e.split(',')[0]),
    ).toEqual(['v1', 'v1a']);
    const removed = await call('PATCH', `/vendors/v1/webhooks/${id}`, { secret: null });
    expect(removed.statusCode).toBe(200);
    expect(removed.json()).not.toHaveProperty('secret');
    const keysOnly = await waitFor(async () => {
      const request = await deliverOne('/moving');
      return request.headers['x-webhook-signature'] === undefined ? request : undefined;
    }, 15_000);
    expect(String(keysOnly.headers['webhook-signature'])).toMatch(/^v1a,\S+$/);
    expect(v1aVerdicts(keysOnly, [keys[0]!.jwk])).toEqual([true]);
  });

  it('the key set names no webhook and answers the same for an unknown, a deleted and an hmac-only webhook id', async () => {
    const signing = await register('EVENT_TYPE_MACHINE_CREATED', '/a', { signature: 'ed25519' });
    const other = await register('EVENT_TYPE_MACHINE_UPDATED', '/b', { signature: 'ed25519' });
    const hmacOnly = await register('EVENT_TYPE_MACHINE_REMOVED', '/c', { secret: WHSEC });
    const deleted = await register('EVENT_TYPE_DEPLOYMENT_CREATED', '/d', { signature: 'ed25519' });
    expect((await call('POST', `/vendors/v1/webhooks/${other}/rotate-signing-key`)).statusCode).toBe(200);
    expect(
      (await t.app.inject({ method: 'DELETE', url: `/vendors/v1/webhooks/${deleted}`, headers: { 'x-api-key': key } }))
        .statusCode,
    ).toBe(204);

    const all = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
    const kids = all.json<{ keys: { kid: string }[] }>().keys.map((k) => k.kid);
    expect(kids).toHaveLength(3);
    for (const kid of kids) expect(kid).toMatch(OPAQUE_KID);
    for (const id of [signing, other, hmacOnly, deleted]) {
      expect(all.body).not.toContain(id);
      expect(all.body).not.toContain(id.replaceAll('-', ''));
    }

    const answers = await Promise.all(
      [hmacOnly, deleted, '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f'].map((id) =>
        t.app.inject({ method: 'GET', url: `/.well-known/jwks.json?webhook_id=${id}` }),
      ),
    );
    for (const res of answers) {
      expect(res.statusCode).toBe(200);
      expect(res.body).toBe('{"keys":[]}');
      expect([res.headers.etag, res.headers['cache-control'], res.headers['content-length']]).toEqual([
        answers[0]!.headers.etag,
        answers[0]!.headers['cache-control'],
        answers[0]!.headers['content-length'],
      ]);
    }
    // The receivers' own keys: one for the first webhook, the rotated pair for the other, no kid shared.
    const own = async (id: string) =>
      (await t.app.inject({ method: 'GET', url: `/.well-known/jwks.json?webhook_id=${id}` }))
        .json<{ keys: { kid: string }[] }>()
        .keys.map((k) => k.kid);
    const [a, b] = [await own(signing), await own(other)];
    expect(a).toHaveLength(1);
    expect(b).toHaveLength(2);
    expect([...a, ...b].sort()).toEqual([...kids].sort());
  });

  it('serves a burst from one reading of the registry, single-flight: 200 requests at once, one scan; one more once the reading is 10 s old', async () => {
    await register('EVENT_TYPE_MACHINE_CREATED', '/burst', { signature: 'ed25519' });
    let scans = 0;
    const counted = Object.assign(Object.create(t.webhooks) as typeof t.webhooks, {
      publicSigningKeys: async (nowMs: number) => {
        scans += 1;
        return t.webhooks.publicSigningKeys(nowMs);
      },
    });
    let now = Date.now();
    const { buildAdminServer } = await import('../../src/admin/server.js');
    const { pino } = await import('pino');
    const server = await buildAdminServer({
      ...t.adminDeps({ logger: pino({ level: 'silent' }), bodyLimitBytes: 1 << 20, isReady: async () => true }),
      webhooks: counted,
      nowMs: () => now,
    });
    try {
      const burst = (n: number) =>
        Promise.all(Array.from({ length: n }, () => server.inject({ method: 'GET', url: '/.well-known/jwks.json' })));
      const first = await burst(200);
      console.log(`jwks burst: 200 requests at once, ${scans} registry scan(s)`);
      expect(first.every((res) => res.statusCode === 200 && res.body === first[0]!.body)).toBe(true);
      expect(first[0]!.json<{ keys: unknown[] }>().keys).toHaveLength(1);
      expect(scans).toBe(1);
      now += 10_000;
      await burst(50);
      expect(scans).toBe(1);
      now += 1;
      await burst(50);
      expect(scans).toBe(2);
    } finally {
      await server.close();
    }
  });

  it('validates signature, and keeps other vendors’ webhooks out of reach', async () => {
    const bad = await call('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      callback_url: 'https://x.example.com/h',
      signature: 'rsa',
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json<{ error: string }>().error).toBe('Invalid request body: signature must be one of hmac, ed25519');
    const id = await register('EVENT_TYPE_MACHINE_UPDATED', '/other', {});
    expect(await publicKeys(id)).toEqual([]);
    const patchBad = await call('PATCH', `/vendors/v1/webhooks/${id}`, { signature: 'ED25519' });
    expect(patchBad.statusCode).toBe(400);
    const switched = await call('PATCH', `/vendors/v1/webhooks/${id}`, { signature: 'ed25519' });
    expect(switched.json()).toMatchObject({ signature: 'ed25519' });
    expect(await publicKeys(id)).toHaveLength(1);

    const otherKey = await t.keyFor(['vendor'], 'someone-else');
    for (const [method, url] of [
      ['GET', `/vendors/v1/webhooks/${id}/public-keys`],
      ['POST', `/vendors/v1/webhooks/${id}/rotate-signing-key`],
    ] as const) {
      expect((await call(method, url, undefined, { 'x-api-key': otherKey })).statusCode).toBe(404);
      expect((await call(method, url, undefined, {})).statusCode).toBe(401);
    }
    expect((await call('GET', '/vendors/v1/webhooks/not-a-uuid/public-keys')).statusCode).toBe(400);
  });
});
