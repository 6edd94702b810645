import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { publicKeyText } from '@hookline/verify';
import { CappedMap } from '../lib/capped-map.js';

/**
 * Ed25519 signing keys of webhooks with `signature: "ed25519"` (Standard Webhooks `v1a`). Each
 * webhook has its own key pair, so a signature binds a request to one webhook: a receiver that
 * trusts only its webhook's public keys cannot be sent another webhook's genuine requests.
 */

/** How a webhook signs: `hmac` (its secret: `v1` and the legacy header) or `ed25519` (also `v1a`). */
export const SIGNATURE_SCHEMES = ['hmac', 'ed25519'] as const;
export type SignatureScheme = (typeof SIGNATURE_SCHEMES)[number];

/**
 * How long a rotated key is published before it signs: twice the key set's cache lifetime (5 min),
 * so a receiver that refetches the set when its copy expires holds the new key before the first
 * request the key signs, even if it fetched just before the rotation.
 */
export const KEY_PUBLISH_LEAD_MS = 10 * 60_000;

/** One key pair of a webhook, the private key in plaintext (only ever in memory; stored sealed). */
export interface SigningKey {
  /**
   * The key's id as receivers see it: opaque (the store derives it under the engine's key from the
   * `<webhook id>.<n>` it keeps), so no kid names a webhook or ties two keys of one webhook together.
   */
  kid: string;
  /** PKCS#8 DER, base64. */
  privateKey: string;
  /** `whpk_` and the 32 raw bytes, base64 (Standard Webhooks' form). */
  publicKey: string;
  createdAtMs: number;
  /** Set on a rotated key: it is published at once and signs from then (KEY_PUBLISH_LEAD_MS later). */
  fromMs?: number;
  /** Set on the previous key during a rotation: it signs beside the new one until then. */
  untilMs?: number;
}

/** A new key pair for `webhookId`, its `n`-th; `kid` is the store's own name for it, `<webhook id>.<n>`. */
export function newSigningKey(webhookId: string, n: number, nowMs: number): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    kid: `${webhookId}.${n}`,
    privateKey: privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64'),
    publicKey: publicKeyText(publicKey),
    createdAtMs: nowMs,
  };
}

/** The number in a key id (`<webhook id>.<n>`), for the next key's. */
export function keyNumber(kid: string): number {
  const n = Number(kid.slice(kid.lastIndexOf('.') + 1));
  return Number.isSafeInteger(n) ? n : 0;
}

/** The keys that sign at `nowMs`: the current one first, then a previous one in its overlap; not a rotated key before its time. */
export function signingKeysAt<K extends Pick<SigningKey, 'fromMs' | 'untilMs'>>(
  keys: readonly K[],
  nowMs: number,
): K[] {
  return publishedKeysAt(keys, nowMs).filter((key) => key.fromMs === undefined || key.fromMs <= nowMs);
}

/** The keys receivers are shown at `nowMs`: those that sign, and a rotated key that is yet to. */
export function publishedKeysAt<K extends Pick<SigningKey, 'untilMs'>>(keys: readonly K[], nowMs: number): K[] {
  return keys.filter((key) => key.untilMs === undefined || key.untilMs > nowMs);
}

/** A public key as the key set document lists it (RFC 8037 OKP JWK, with its key id). */
export interface SigningJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  kid: string;
  use: 'sig';
  alg: 'EdDSA';
}

export function jwkOf(key: Pick<SigningKey, 'kid' | 'publicKey'>): SigningJwk {
  return {
    kty: 'OKP',
    crv: 'Ed25519',
    x: Buffer.from(key.publicKey.slice('whpk_'.length), 'base64').toString('base64url'),
    kid: key.kid,
    use: 'sig',
    alg: 'EdDSA',
  };
}

/** Private KeyObjects by their PKCS#8 text: importing costs more than signing, and keys repeat. */
const privateKeys = new CappedMap<string, KeyObject>(10_000);

/** The KeyObject of a stored private key (cached). */
export function privateKeyObject(privateKey: string): KeyObject {
  let key = privateKeys.get(privateKey);
  if (key === undefined) {
    key = createPrivateKey({ key: Buffer.from(privateKey, 'base64'), format: 'der', type: 'pkcs8' });
    privateKeys.set(privateKey, key);
  }
  return key;
}
