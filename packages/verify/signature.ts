/**
 * The signatures Hookline computes (README "What a vendor receives"). The engine signs with these
 * very functions, so a receiver's tests can build a request exactly as Hookline would.
 */
import { createHmac, type KeyObject } from 'node:crypto';

/** Standard Webhooks marks a base64 key with this prefix. */
const STANDARD_SECRET_PREFIX = 'whsec_';

/** The key of `webhook-signature` for a secret: the base64-decoded rest after `whsec_`, else the secret's UTF-8 bytes. */
export function secretKeyBytes(secret: string): Buffer {
  return secret.startsWith(STANDARD_SECRET_PREFIX) ? Buffer.from(secret.slice(STANDARD_SECRET_PREFIX.length), 'base64') : Buffer.from(secret, 'utf8');
}

/**
 * Base64 HMAC-SHA256 of `{webhookId}.{timestampSec}.{body}` keyed by `secretKeyBytes(secret)` (or a
 * KeyObject of those bytes): an entry of `webhook-signature` is `v1,` followed by this.
 */
export function standardSignature(key: Uint8Array | KeyObject, webhookId: string, timestampSec: number | string, body: string | Uint8Array): string {
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
