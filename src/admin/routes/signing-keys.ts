import { createHash } from 'node:crypto';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { jwkOf, KEY_PUBLISH_LEAD_MS, publishedKeysAt, type SigningJwk } from '../../domain/signing-keys.js';
import type { PublicSigningKey, WebhookRegistry } from '../../store/webhooks.js';
import { vendorOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid, isoOrNull } from '../errors.js';
import { errorResponses, noQueryParameters, queryParameters } from '../schemas.js';

const idParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID) as returned on registration.') });

const jwkSchema = z
  .object({
    kty: z.literal('OKP'),
    crv: z.literal('Ed25519'),
    x: z.string().describe('The 32-byte public key, base64url (RFC 8037).'),
    kid: z
      .string()
      .describe(
        'The key’s id: opaque, it names no webhook. A webhook’s keys are in GET /vendors/v1/webhooks/{id}/public-keys, or the key set narrowed by webhook_id.',
      ),
    use: z.literal('sig'),
    alg: z.literal('EdDSA'),
  })
  .meta({ id: 'SigningJwk' });

const publicKeySchema = z.object({
  kid: z.string(),
  public_key: z
    .string()
    .describe('whpk_ and the 32 raw bytes in base64 (Standard Webhooks), for @hookline/verify or any Ed25519 library.'),
  jwk: jwkSchema,
  created_at: z.string(),
  signs_from: z
    .string()
    .describe(
      `When the key starts signing: at once for a webhook’s first key; ${KEY_PUBLISH_LEAD_MS / 60_000} minutes after a rotation for the new one.`,
    ),
  expires_at: z
    .string()
    .nullable()
    .describe('When a replaced key stops signing (its rotation overlap ends); null for the current key.'),
});

/**
 * How long one reading of the key set serves requests before the registry is scanned again: far
 * below KEY_PUBLISH_LEAD_MS, so a rotated key is in every process's set long before it signs.
 */
const KEY_SET_REUSE_MS = 10_000;

/** The key set's HTTP cache lifetime; KEY_PUBLISH_LEAD_MS is twice it. */
const KEY_SET_MAX_AGE_S = KEY_PUBLISH_LEAD_MS / 2 / 1000;

function publicKeyOf(key: Omit<PublicSigningKey, 'webhookId'>): z.infer<typeof publicKeySchema> {
  return {
    kid: key.kid,
    public_key: key.publicKey,
    jwk: jwkOf(key),
    created_at: new Date(key.createdAtMs).toISOString(),
    signs_from: new Date(key.fromMs ?? key.createdAtMs).toISOString(),
    expires_at: isoOrNull(key.untilMs),
  };
}

/** A key set answer and its ETag, computed once per reading of the registry. */
interface KeySetAnswer {
  body: { keys: SigningJwk[] };
  etag: string;
}

function keySetAnswer(keys: readonly PublicSigningKey[]): KeySetAnswer {
  const body = { keys: keys.map(jwkOf) };
  return { body, etag: `"${createHash('sha256').update(JSON.stringify(body)).digest('base64url').slice(0, 27)}"` };
}

/**
 * The installation's key set, read from the registry (a scan of every webhook) at most once per
 * KEY_SET_REUSE_MS and single-flight: the requests of a burst share one reading in progress, so a
 * burst costs one scan, not one per request that found the copy stale. A failed reading is not kept.
 */
class KeySetCache {
  #reading: { atMs: number; keys: Promise<{ all: PublicSigningKey[]; answer: KeySetAnswer }> } | undefined;

  constructor(private readonly read: (nowMs: number) => Promise<PublicSigningKey[]>) {}

  get(nowMs: number): Promise<{ all: PublicSigningKey[]; answer: KeySetAnswer }> {
    if (this.#reading === undefined || nowMs - this.#reading.atMs > KEY_SET_REUSE_MS) {
      const reading = { atMs: nowMs, keys: this.read(nowMs).then((all) => ({ all, answer: keySetAnswer(all) })) };
      this.#reading = reading;
      reading.keys.catch(() => {
        if (this.#reading === reading) this.#reading = undefined;
      });
    }
    return this.#reading.keys;
  }

  /** A change this process made (a rotation) shows at the next request. */
  drop(): void {
    this.#reading = undefined;
  }
}

export interface SigningKeyRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  nowMs: () => number;
}

/**
 * The public side of webhooks that sign with Ed25519 (`signature: "ed25519"`): each webhook's public
 * keys, key rotation, and the installation's key set document at `/.well-known/jwks.json`, which
 * needs no key (public keys are public) so receivers can fetch and cache it.
 */
export function signingKeyRoutes(deps: SigningKeyRouteDeps): FastifyPluginAsyncZod {
  const keySet = new KeySetCache((nowMs) => deps.webhooks.publicSigningKeys(nowMs));

  return async (app) => {
    app.get(
      '/vendors/v1/webhooks/:webhook_id/public-keys',
      {
        onRequest: deps.authorize('vendor', { portal: 'read' }),
        schema: {
          tags: ['webhooks'],
          summary: 'The webhook’s Ed25519 public keys',
          description:
            'The keys whose v1a signatures the webhook’s deliveries carry: the current key, and during a rotation the new one ' +
            '(from signs_from) and the replaced one (until expires_at). Empty for a webhook that signs with hmac only.',
          params: idParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({
              webhook_id: z.string(),
              signature: z.enum(['hmac', 'ed25519']),
              keys: z.array(publicKeySchema),
            }),
            ...errorResponses(400, 401, 403, 404, 500),
          },
        },
      },
      async (request) => {
        const webhookId = checkedUuid(request.params.webhook_id, 'invalid_webhook_id');
        const webhook = await deps.webhooks.get(vendorOf(request), webhookId);
        if (!webhook) throw new ApiError('webhook_not_found');
        const keys = webhook.signature === 'ed25519' ? publishedKeysAt(webhook.signingKeys, deps.nowMs()) : [];
        return { webhook_id: webhookId, signature: webhook.signature, keys: keys.map(publicKeyOf) };
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/rotate-signing-key',
      {
        onRequest: deps.authorize('vendor', { portal: 'manage' }),
        schema: {
          tags: ['webhooks'],
          summary: 'Rotate the Ed25519 signing key',
          description:
            `Generates a new key pair and publishes it at once; it signs from signs_from, ${KEY_PUBLISH_LEAD_MS / 60_000} minutes ` +
            'later, so receivers that refetch the key set as its cache allows hold it before they need it. The replaced key signs ' +
            'beside it until expires_at (the overlap, 24 h by default, after signs_from).',
          params: idParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({
              webhook_id: z.string(),
              keys: z.array(publicKeySchema).describe('The new key first, then the replaced one.'),
            }),
            ...errorResponses(400, 401, 403, 404, 409, 500),
          },
        },
      },
      async (request) => {
        const webhookId = checkedUuid(request.params.webhook_id, 'invalid_webhook_id');
        const vendorId = vendorOf(request);
        const webhook = await deps.webhooks.get(vendorId, webhookId);
        if (!webhook) throw new ApiError('webhook_not_found');
        if (webhook.signature !== 'ed25519') throw new ApiError('webhook_not_ed25519');
        const result = await deps.webhooks.update(vendorId, webhookId, { rotateSigningKey: true });
        if (!result.ok) throw new ApiError('webhook_not_found');
        keySet.drop();
        return { webhook_id: webhookId, keys: result.webhook.signingKeys.map(publicKeyOf) };
      },
    );

    app.get(
      '/.well-known/jwks.json',
      {
        schema: {
          tags: ['webhooks'],
          security: [],
          summary: 'The Ed25519 key set of this installation',
          description:
            'Every public key that signs deliveries, or will after a rotation (JWK, RFC 8037), for receivers to fetch and cache. ' +
            'Kids are opaque: they name no webhook. A receiver trusts only its own webhook’s keys (another webhook’s key would ' +
            'accept requests meant for that webhook), so it asks for them with webhook_id. Any well-formed webhook_id answers 200: ' +
            'an unknown one, a deleted one and one that signs with hmac only all answer the same empty set. Cacheable for ' +
            `${KEY_SET_MAX_AGE_S / 60} minutes; a rotated key is listed ${KEY_PUBLISH_LEAD_MS / 60_000} minutes before it signs.`,
          querystring: queryParameters({
            webhook_id: z
              .string()
              .optional()
              .describe('Only this webhook’s keys (its id, as returned on registration).'),
          }),
          response: {
            200: z.object({ keys: z.array(jwkSchema) }).meta({ id: 'JsonWebKeySet' }),
            304: z.null().describe('Not modified (If-None-Match).'),
            ...errorResponses(400, 500),
          },
        },
      },
      async (request, reply) => {
        const only = request.query.webhook_id;
        const webhookId = only === undefined ? undefined : checkedUuid(only, 'invalid_webhook_id');
        // Narrowed or not, the answer comes from the shared reading: no lookup by id, so neither the
        // answer nor its timing tells an unknown webhook from one without keys.
        const { all, answer } = await keySet.get(deps.nowMs());
        const { body, etag } =
          webhookId === undefined ? answer : keySetAnswer(all.filter((key) => key.webhookId === webhookId));
        void reply.header('cache-control', `public, max-age=${KEY_SET_MAX_AGE_S}`).header('etag', etag);
        if (request.headers['if-none-match'] === etag) return reply.code(304).send(null);
        return body;
      },
    );
  };
}
