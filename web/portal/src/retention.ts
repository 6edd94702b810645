import type { Webhook } from './types.js';

/**
 * What a save of the webhook form sends for its retention field (`24h`, `3d`; the API checks the
 * format and the installation's ceiling): for a new webhook (`webhook` undefined) the text, or
 * nothing when it is empty (the installation's retention); for an edit, only a change, and null
 * for a field emptied (back to the installation's). Undefined: send nothing.
 */
export function retentionChange(
  webhook: Pick<Webhook, 'retention'> | undefined,
  text: string,
): string | null | undefined {
  const typed = text.trim() === '' ? null : text.trim();
  if (webhook === undefined) return typed ?? undefined;
  // An engine from before retentions answers none: the same as the installation's.
  return typed === (webhook.retention ?? null) ? undefined : typed;
}
