/**
 * Verifying Hookline's signatures in a receiver: `import { verifyStandardWebhook } from '@hookline/verify'`.
 *
 * Always verify against the raw request body (the exact bytes received), never a re-serialised
 * JSON object: any change in whitespace or key order changes the signature.
 */
import { timingSafeEqual, verify, type KeyObject } from 'node:crypto';
import {
  ed25519PublicKey,
  legacySignature,
  secretKeyBytes,
  signedContent,
  standardSignature,
  type PublicJwk,
} from './signature.js';

/** A `Headers` object (fetch, undici) or a plain record such as Node's `req.headers`. */
export type HeaderSource =
  { get(name: string): string | null } | Readonly<Record<string, string | readonly string[] | undefined>>;

export interface StandardWebhookInput {
  /** The webhook's secret exactly as registered (`whsec_…` or any other string). */
  secret: string;
  headers: HeaderSource;
  /** The raw request body. */
  body: string | Uint8Array;
  /** How far `webhook-timestamp` may be from now, either way; default 300 s (replay protection). */
  toleranceSec?: number;
  /** The current Unix time in seconds; default the system clock. */
  nowSec?: number;
}

export interface AsymmetricWebhookInput {
  /**
   * The webhook's public keys (`whpk_…`, JWKs from the key set document, or KeyObjects): during a
   * rotation two sign; any may match. Only this webhook's keys: a key of another webhook would
   * accept requests meant for that one.
   */
  publicKeys: readonly (string | PublicJwk | KeyObject)[];
  headers: HeaderSource;
  /** The raw request body. */
  body: string | Uint8Array;
  /** How far `webhook-timestamp` may be from now, either way; default 300 s (replay protection). */
  toleranceSec?: number;
  /** The current Unix time in seconds; default the system clock. */
  nowSec?: number;
}

export interface LegacySignatureInput {
  secret: string;
  /** The `x-webhook-signature` header value, `sha256=<hex>`. */
  header: string | readonly string[] | null | undefined;
  /** The raw request body. */
  body: string | Uint8Array;
}

const SHA256_BYTES = 32;
const BASE64_ED25519 = /^[A-Za-z0-9+/]{86}==$/;
const BASE64_SHA256 = /^[A-Za-z0-9+/]{43}=$/;
const HEX_SHA256 = /^[0-9a-fA-F]{64}$/;
const TIMESTAMP = /^\d{1,15}$/;

/**
 * True when the Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`)
 * carry a valid `v1` signature of `body` under `secret` and the timestamp is within the tolerance.
 * Any of the space-separated signatures may match (during a rotation two are sent).
 *
 * @example
 * import { createServer } from 'node:http';
 * import { verifyStandardWebhook } from '@hookline/verify';
 *
 * createServer(async (req, res) => {
 *   const chunks: Buffer[] = [];
 *   for await (const chunk of req) chunks.push(chunk as Buffer);
 *   const body = Buffer.concat(chunks);
 *   const ok = verifyStandardWebhook({ secret: process.env.WEBHOOK_SECRET!, headers: req.headers, body });
 *   res.statusCode = ok ? 204 : 401;
 *   res.end();
 * }).listen(3000);
 */
export function verifyStandardWebhook(input: StandardWebhookInput): boolean {
  const signed = signedParts(input, 'v1,', BASE64_SHA256);
  if (signed === undefined) return false;
  const expected = Buffer.from(
    standardSignature(secretKeyBytes(input.secret), signed.id, signed.timestamp, input.body),
    'base64',
  );
  let matched = false;
  // Every candidate is compared, so the time taken does not reveal which one matched.
  for (const encoded of signed.signatures)
    if (timingSafeEqual(Buffer.from(encoded, 'base64'), expected)) matched = true;
  return matched;
}

/**
 * True when the Standard Webhooks headers carry a valid `v1a` (Ed25519) signature of `body` under one
 * of `publicKeys` and the timestamp is within the tolerance. Webhooks set to `signature: "ed25519"`
 * send it; their public keys come from `GET /vendors/v1/webhooks/{id}/public-keys` or the key set
 * document narrowed to the webhook (`/.well-known/jwks.json?webhook_id=<id>`; kids are opaque).
 *
 * @example
 * const ok = verifyAsymmetricWebhook({ publicKeys: [process.env.WEBHOOK_PUBLIC_KEY!], headers: req.headers, body: rawBody });
 */
export function verifyAsymmetricWebhook(input: AsymmetricWebhookInput): boolean {
  const signed = signedParts(input, 'v1a,', BASE64_ED25519);
  if (signed === undefined) return false;
  const keys = input.publicKeys.map((key) => ed25519PublicKey(key));
  const content = signedContent(signed.id, signed.timestamp, input.body);
  let matched = false;
  for (const encoded of signed.signatures) {
    const signature = Buffer.from(encoded, 'base64');
    for (const key of keys) if (verify(null, content, key, signature)) matched = true;
  }
  return matched;
}

/**
 * The id, timestamp and the well-formed signatures of one version (`v1,` or `v1a,`) from the
 * Standard Webhooks headers; undefined when a header is missing or malformed or the timestamp is
 * outside the tolerance.
 */
function signedParts(
  input: { headers: HeaderSource; toleranceSec?: number; nowSec?: number },
  version: 'v1,' | 'v1a,',
  shape: RegExp,
): { id: string; timestamp: string; signatures: string[] } | undefined {
  const { headers, toleranceSec = 300 } = input;
  const id = single(header(headers, 'webhook-id'));
  const timestamp = single(header(headers, 'webhook-timestamp'));
  const signatures = header(headers, 'webhook-signature');
  if (!id || timestamp === undefined || signatures === undefined || !TIMESTAMP.test(timestamp)) return undefined;
  const nowSec = input.nowSec ?? Math.floor(Date.now() / 1000);
  if (Math.abs(nowSec - Number(timestamp)) > toleranceSec) return undefined;
  // Node joins repeated headers with ", "; the list itself is space-separated.
  const entries = [signatures]
    .flat()
    .join(' ')
    .split(/\s+/)
    .map((candidate) => candidate.replace(/,$/, ''))
    .filter((entry) => entry.startsWith(version))
    .map((entry) => entry.slice(version.length))
    .filter((encoded) => shape.test(encoded));
  return { id, timestamp, signatures: entries };
}

/**
 * True when `header` (`x-webhook-signature`) is `sha256=<hex HMAC-SHA256 of body>` keyed by the
 * secret's UTF-8 bytes: the platform's legacy scheme (a `whsec_` prefix is not decoded here).
 *
 * @example
 * const ok = verifyLegacySignature({ secret, header: req.headers['x-webhook-signature'], body: rawBody });
 *
 * // Or with nothing but node:crypto:
 * const expected = 'sha256=' + createHmac('sha256', secret).update(rawBody).digest('hex');
 * const ok = received.length === expected.length && timingSafeEqual(Buffer.from(received), Buffer.from(expected));
 */
export function verifyLegacySignature(input: LegacySignatureInput): boolean {
  const value = single(input.header ?? undefined);
  if (value === undefined || !value.startsWith('sha256=')) return false;
  const hex = value.slice('sha256='.length);
  if (!HEX_SHA256.test(hex)) return false;
  const expected = Buffer.from(legacySignature(input.secret, input.body), 'hex');
  const received = Buffer.from(hex, 'hex');
  return received.length === SHA256_BYTES && timingSafeEqual(received, expected);
}

/** A header's value, case-insensitively, from either kind of header source. */
function header(headers: HeaderSource, name: string): string | readonly string[] | undefined {
  if (typeof headers.get === 'function') {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const record = headers as Readonly<Record<string, string | readonly string[] | undefined>>;
  if (record[name] !== undefined) return record[name];
  const key = Object.keys(record).find((k) => k.toLowerCase() === name);
  return key === undefined ? undefined : record[key];
}

/** One value; a header sent several times is ambiguous and counts as missing. */
function single(value: string | readonly string[] | undefined): string | undefined {
  if (typeof value === 'string') return value;
  return value?.length === 1 ? value[0] : undefined;
}
