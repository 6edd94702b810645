import { hash, randomUUID } from 'node:crypto';
import { z } from 'zod';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A UUID as the engine writes ids it sends (event ids in envelopes and headers): lower case. */
export const LOWER_CASE_UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** True for a UUID in its canonical 8-4-4-4-12 hex form (any version). */
export function isUuid(text: string): boolean {
  return UUID_RE.test(text);
}

/** A new random (v4) UUID, the form of webhook, task and event ids. */
export function newId(): string {
  return randomUUID();
}

/**
 * Identifiers that come from the platform (vendor, machine, deployment ids): 1–128 characters of
 * letters, digits and `._:@-`, so they are safe inside Redis key names and URLs.
 */
export const EXTERNAL_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/;

export const externalIdSchema = z
  .string()
  .regex(EXTERNAL_ID_RE, 'must be 1-128 characters: letters, digits and . _ : @ - (starting with a letter or digit)');

/**
 * The delivery id of (event, webhook): a UUID derived from both, so enqueueing the same pair again
 * (an ingest retried after a crash) finds the same job instead of adding a second delivery.
 */
export function deliveryIdFor(eventId: string, webhookId: string): string {
  // The one-shot hash: no Hash object per call (about half the cost for inputs this short).
  const hex = hash('sha256', `${eventId}\n${webhookId}`, 'hex');
  // Shaped as a version-8 (custom) UUID.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16] ?? '0', 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
