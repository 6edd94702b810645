import { createSecretKey, type KeyObject } from 'node:crypto';
// The signatures are the client package's own functions, so what receivers verify is what is signed.
import { asymmetricSignature, legacySignature, secretKeyBytes, standardSignature } from '@hookline/verify';
import { CappedMap } from '../../lib/capped-map.js';

/** HMAC keys by secret: importing a key costs more than hashing a small body, and secrets repeat. */
const keyCache = new CappedMap<string, { standard: KeyObject; legacy: KeyObject }>(10_000);

function keysOf(secret: string): { standard: KeyObject; legacy: KeyObject } {
  let keys = keyCache.get(secret);
  if (keys === undefined) {
    keys = { standard: createSecretKey(secretKeyBytes(secret)), legacy: createSecretKey(Buffer.from(secret, 'utf8')) };
    keyCache.set(secret, keys);
  }
  return keys;
}

export interface SignatureInput {
  /** The event id; the same on every retry. */
  webhookId: string;
  /** Unix seconds of this attempt. */
  timestampSec: number;
  /** The exact body that will be sent: its text, or its UTF-8 bytes (then signed and sent without another encoding). */
  body: string | Buffer;
  /** Current secret first, then the previous one during a rotation; empty when the webhook has none. */
  secrets: readonly string[];
  /** Ed25519 private keys (`signature: "ed25519"`): the current one first, then the previous one during a rotation. */
  signingKeys?: readonly KeyObject[];
}

/**
 * The signature headers of one attempt (lowercase names): always `webhook-id` and `webhook-timestamp`;
 * `webhook-signature` with one `v1,` entry per secret and one `v1a,` entry per signing key; and, with
 * secrets, the legacy `x-webhook-signature` from the last secret: the previous one during a
 * rotation, else the current one (the legacy scheme is HMAC only).
 */
export function signatureHeaders(input: SignatureInput): Record<string, string> {
  const { webhookId, timestampSec, body, secrets } = input;
  if (!Number.isSafeInteger(timestampSec) || timestampSec < 0) {
    throw new RangeError('timestampSec must be a non-negative integer number of seconds');
  }
  const headers: Record<string, string> = {
    'webhook-id': webhookId,
    'webhook-timestamp': String(timestampSec),
  };
  // The legacy header holds one signature, so during a rotation it must be the one every receiver
  // can already check: the previous secret's, until the overlap ends and the new one takes over.
  const legacySecret = secrets.at(-1);
  const signingKeys = input.signingKeys ?? [];
  if (legacySecret === undefined && signingKeys.length === 0) return headers;
  // The body's bytes once, for every signature of this attempt.
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  headers['webhook-signature'] = [
    ...secrets.map((secret) => `v1,${standardSignature(keysOf(secret).standard, webhookId, timestampSec, bytes)}`),
    ...signingKeys.map((key) => `v1a,${asymmetricSignature(key, webhookId, timestampSec, bytes)}`),
  ].join(' ');
  if (legacySecret !== undefined)
    headers['x-webhook-signature'] = `sha256=${legacySignature(keysOf(legacySecret).legacy, bytes)}`;
  return headers;
}

/**
 * The headers Hookline sets on a delivery (lowercase names, in the order sent): the signature
 * headers, then `x-webhook-event` and `x-webhook-attempt`. The sender adds content-type and
 * user-agent, the HTTP client host, connection and content-length (see attemptRequestHeaders).
 */
export function deliveryHeaders(
  input: SignatureInput & { eventType: string; attempt: number },
): Record<string, string> {
  // Added to the signature headers' own new object, after them: the order sent.
  const headers = signatureHeaders(input);
  headers['x-webhook-event'] = input.eventType;
  headers['x-webhook-attempt'] = String(input.attempt);
  return headers;
}
