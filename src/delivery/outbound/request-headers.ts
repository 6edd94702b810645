import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { SentRequest } from '../../domain/delivery.js';
import { SECRET_MASK } from '../../domain/receiver-auth.js';
import { deliveryHeaders } from './sign.js';

/**
 * The request headers of past attempts, as the delivery log shows them. They are rebuilt rather than
 * stored: everything in them follows from the delivery record, the attempt's number and start time,
 * and the few facts an attempt records about its request (`SentRequest`, about 100 bytes of JSON
 * against about 400 for the headers themselves, times up to 1000 deliveries per webhook).
 */

/** What stands in for a signature's value: only its scheme prefix stays visible. */
const SIGNATURE_MASK = SECRET_MASK;

/** `v1,abc= v1,def=` → `v1,•••• v1,••••` and `sha256=abc` → `sha256=••••`: each entry keeps its scheme prefix. */
export function maskSignature(value: string): string {
  return value
    .split(' ')
    .map((entry) => `${/^[^,=]*[,=]/.exec(entry)?.[0] ?? ''}${SIGNATURE_MASK}`)
    .join(' ');
}

let standIn: KeyObject | undefined;
/** A key to sign with where only the masked form is shown (made once, when first needed). */
function standInKey(): KeyObject {
  standIn ??= generateKeyPairSync('ed25519').privateKey;
  return standIn;
}

export interface AttemptHeadersInput {
  eventId: string;
  eventType: string;
  attempt: number;
  /** When the attempt started (its whole seconds were signed). */
  atMs: number;
  sent: SentRequest;
}

/**
 * An attempt's request headers exactly as its receiver got them (lowercase names, in the order
 * sent), every signature value masked: the HTTP client's host and connection first; then the
 * headers Hookline sets, built again by the function that built them for the send (with stand-in
 * secrets, as many as signed, since only the masked form is shown); then the sender's content-type
 * and user-agent; last the client's content-length.
 */
export function attemptRequestHeaders(input: AttemptHeadersInput): Record<string, string> {
  const { sent } = input;
  const own = deliveryHeaders({
    webhookId: input.eventId,
    eventType: input.eventType,
    attempt: input.attempt,
    timestampSec: Math.floor(input.atMs / 1000),
    body: '',
    secrets: Array.from({ length: sent.signatures }, (_, i) => `stand-in-${i}`),
    signingKeys: Array.from({ length: sent.keySignatures ?? 0 }, standInKey),
  });
  for (const [name, value] of Object.entries(own)) if (name.includes('signature')) own[name] = maskSignature(value);
  // The webhook's custom headers and auth follow, masked: their values are never recorded.
  for (const name of sent.headerNames ?? []) own[name] = SECRET_MASK;
  if (sent.authScheme !== undefined) own.authorization = `${sent.authScheme} ${SECRET_MASK}`;
  if (sent.traceparent !== undefined) own.traceparent = sent.traceparent;
  if (sent.tracestate !== undefined) own.tracestate = sent.tracestate;
  return {
    host: sent.host,
    connection: 'keep-alive',
    ...own,
    'content-type': 'application/json',
    'user-agent': sent.userAgent,
    'content-length': String(sent.bodyBytes),
  };
}
