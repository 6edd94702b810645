import { createHash } from 'node:crypto';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { jwkOf } from '../../domain/signing-keys.js';
import { webhookSigningKeys } from '../../domain/webhook.js';
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
    kid: z.string().describe('`<webhook id>.<n>`: the webhook’s n-th key.'),
    use: z.literal('sig'),
    alg: z.literal('EdDSA'),
  })
  .meta({ id: 'SigningJwk' });

const publicKeySchema = z.object({
  kid: z.string(),
  public_key: z.string().describe('whpk_ and the 32 raw bytes in base64 (Standard Webhooks), for @hookline/verify or any Ed25519 library.'),
  jwk: jwkSchema,
  created_at: z.string(),
  expires_at: z.string().nullable().describe('When a replaced key stops signing (its rotation overlap ends); null for the current key.'),
});

/** How long the key set document is reused before it is read again (a rotation shows within this). */
const KEY_SET_REUSE_MS = 10_000;

function publicKeyOf(key: Omit<PublicSigningKey, 'webhookId'>): z.infer<typeof publicKeySchema> {
  return {
    kid: key.kid,
    public_key: key.publicKey,
    jwk: jwkOf(key),
    created_at: new Date(key.createdAtMs).toISOString(),
    expires_at: isoOrNull(key.untilMs),
  };
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
  let keySet: { atMs: number; keys: PublicSigningKey[] } | undefined;
  const allKeys = async () => {
    const nowMs = deps.nowMs();
    if (keySet === undefined || nowMs - keySet.atMs > KEY_SET_REUSE_MS) keySet = { atMs: nowMs, keys: await deps.webhooks.publicSigningKeys(nowMs) };
    return keySet.keys;
  };

  return async (app) => {
    app.get(
      '/vendors/v1/webhooks/:webhook_id/public-keys',
      {
        onRequest: deps.authorize('vendor', { portal: 'read' }),
        schema: {
          tags: ['webhooks'],
          summary: 'The webhook’s Ed25519 public keys',
          description:
            'The keys whose v1a signatures the webhook’s deliveries carry: the current key, and during a rotation the replaced one ' +
            'until expires_at. Empty for a webhook that signs with hmac only.',
          params: idParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({ webhook_id: z.string(), signature: z.enum(['hmac', 'ed25519']), keys: z.array(publicKeySchema) }),
            ...errorResponses(400, 401, 403, 404, 500),
          },
        },
      },
      async (request) => {
        const webhookId = checkedUuid(request.params.webhook_id, 'invalid_webhook_id');
        const webhook = await deps.webhooks.get(vendorOf(request), webhookId);
        if (!webhook) throw new ApiError('webhook_not_found');
        const nowMs = deps.nowMs();
        const keys = webhookSigningKeys(webhook, nowMs);
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
            'Generates a new key pair: from now on deliveries carry a v1a signature by the new key and, until the overlap ends ' +
            '(24 h by default), one by the replaced key too, so receivers can fetch the new public key before they need it.',
          params: idParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({ webhook_id: z.string(), keys: z.array(publicKeySchema).describe('The new key first, then the replaced one.') }),
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
            'Every public key that signs deliveries now (JWK, RFC 8037), for receivers to fetch and cache. A key’s kid is ' +
            '`<webhook id>.<n>`: a receiver trusts only the keys whose kid starts with its own webhook’s id (another webhook’s ' +
            'key would accept requests meant for that webhook). webhook_id narrows the set to one webhook. Cacheable for 5 minutes; ' +
            'a rotated key keeps signing for its overlap, far longer.',
          querystring: queryParameters({ webhook_id: z.string().optional().describe('Only this webhook’s keys.') }),
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
        const keys = (await allKeys()).filter((key) => webhookId === undefined || key.webhookId === webhookId).map(jwkOf);
        const body = { keys };
        const etag = `"${createHash('sha256').update(JSON.stringify(body)).digest('base64url').slice(0, 27)}"`;
        void reply.header('cache-control', 'public, max-age=300').header('etag', etag);
        if (request.headers['if-none-match'] === etag) return reply.code(304).send(null);
        return body;
      },
    );
  };
}
