/**
 * The signatures Hookline computes (README "What a vendor receives"). The engine signs with these
 * very functions, so a receiver's tests can build a request exactly as Hookline would.
 */
import { createHmac, createPublicKey, KeyObject, sign } from 'node:crypto';

/** Standard Webhooks marks a base64 key with this prefix. */
const STANDARD_SECRET_PREFIX = 'whsec_';

/** The key of `webhook-signature` for a secret: the base64-decoded rest after `whsec_`, else the secret's UTF-8 bytes. */
export function secretKeyBytes(secret: string): Buffer {
  return secret.startsWith(STANDARD_SECRET_PREFIX)
    ? Buffer.from(secret.slice(STANDARD_SECRET_PREFIX.length), 'base64')
    : Buffer.from(secret, 'utf8');
}

/**
 * Base64 HMAC-SHA256 of `{webhookId}.{timestampSec}.{body}` keyed by `secretKeyBytes(secret)` (or a
 * KeyObject of those bytes): an entry of `webhook-signature` is `v1,` followed by this.
 */
export function standardSignature(
  key: Uint8Array | KeyObject,
  webhookId: string,
  timestampSec: number | string,
  body: string | Uint8Array,
): string {
  // Hashing the prefix and the body separately keeps raw body bytes exact (no string round trip).
  return createHmac('sha256', key).update(`${webhookId}.${timestampSec}.`, 'utf8').update(body).digest('base64');
}

/**
 * Hex HMAC-SHA256 of the body keyed by the secret's UTF-8 bytes (or a KeyObject of them): the
 * legacy `x-webhook-signature` is `sha256=` followed by this.
 */
export function legacySignature(secret: string | KeyObject, body: string | Uint8Array): string {
  // The platform's legacy scheme never decoded whsec_ secrets, so neither does Hookline.
  return createHmac('sha256', typeof secret === 'string' ? Buffer.from(secret, 'utf8') : secret)
    .update(body)
    .digest('hex');
}

/** An Ed25519 public key as a JWK (the key set document's entries). */
export interface PublicJwk {
  kty?: string;
  crv?: string;
  x?: string;
}

/** Standard Webhooks marks an Ed25519 public key (its 32 raw bytes, base64) with this prefix. */
const PUBLIC_KEY_PREFIX = 'whpk_';
const ED25519_KEY_BYTES = 32;

/**
 * Base64 Ed25519 signature of `{webhookId}.{timestampSec}.{body}` (the content `v1` signs) under a
 * private key: an entry of `webhook-signature` is `v1a,` followed by this.
 */
export function asymmetricSignature(
  privateKey: KeyObject,
  webhookId: string,
  timestampSec: number | string,
  body: string | Uint8Array,
): string {
  return sign(null, signedContent(webhookId, timestampSec, body), privateKey).toString('base64');
}

/** The bytes `v1` and `v1a` sign: `{webhookId}.{timestampSec}.` then the body's exact bytes. */
export function signedContent(webhookId: string, timestampSec: number | string, body: string | Uint8Array): Buffer {
  const prefix = Buffer.from(`${webhookId}.${timestampSec}.`, 'utf8');
  return Buffer.concat([prefix, typeof body === 'string' ? Buffer.from(body, 'utf8') : body]);
}

/** An Ed25519 public key as Standard Webhooks writes it: `whpk_` and the 32 raw bytes in base64. */
export function publicKeyText(publicKey: KeyObject): string {
  const jwk = publicKey.export({ format: 'jwk' });
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || jwk.x === undefined)
    throw new TypeError('not an Ed25519 public key');
  return PUBLIC_KEY_PREFIX + Buffer.from(jwk.x, 'base64url').toString('base64');
}

/**
 * A public key to verify with, from `whpk_…` (as the public-keys route and the portal show it), a
 * JWK of the key set document (`{"kty": "OKP", "crv": "Ed25519", "x": …}`) or a KeyObject.
 */
export function ed25519PublicKey(key: string | PublicJwk | KeyObject): KeyObject {
  if (key instanceof KeyObject) {
    if (key.asymmetricKeyType !== 'ed25519' || key.type !== 'public') throw new TypeError('not an Ed25519 public key');
    return key;
  }
  let x: string;
  if (typeof key === 'string') {
    const raw = Buffer.from(key.startsWith(PUBLIC_KEY_PREFIX) ? key.slice(PUBLIC_KEY_PREFIX.length) : key, 'base64');
    if (raw.length !== ED25519_KEY_BYTES)
      throw new TypeError('an Ed25519 public key is 32 bytes (whpk_ and 44 base64 characters)');
    x = raw.toString('base64url');
  } else {
    if (key.kty !== 'OKP' || key.crv !== 'Ed25519' || typeof key.x !== 'string')
      throw new TypeError('not an Ed25519 JWK (kty OKP, crv Ed25519)');
    x = key.x;
  }
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' });
}
