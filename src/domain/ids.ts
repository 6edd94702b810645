import { randomUUID } from 'node:crypto';
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
