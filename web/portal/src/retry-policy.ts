import type { Webhook } from './types.js';

/** A webhook's retry policy as the API takes it. */
export interface RetryBody {
  schedule?: string[];
  max_age?: string;
}

/** The retry delays typed in the form (`30s, 5m, 1h`, commas or spaces between), or null when empty. */
export function scheduleOf(text: string): string[] | null {
  const delays = text.split(/[\s,]+/).filter((delay) => delay !== '');
  return delays.length === 0 ? null : delays;
}

/** The form's text of a webhook's retry delays. */
export function scheduleText(webhook: Pick<Webhook, 'retry'> | undefined): string {
  return webhook?.retry?.schedule?.join(', ') ?? '';
}

/**
 * What a save of the webhook form sends for its retry fields (the API checks the formats and the
 * installation's bounds): for a new webhook (`webhook` undefined) the policy, or nothing when both
 * fields are empty; for an edit, only a change (the policy is replaced as a whole), and null when
 * both are emptied (back to the installation's schedule). Undefined: send nothing.
 */
export function retryChange(
  webhook: Pick<Webhook, 'retry'> | undefined,
  schedule: string,
  maxAge: string,
): RetryBody | null | undefined {
  const delays = scheduleOf(schedule);
  const age = maxAge.trim() === '' ? null : maxAge.trim();
  const typed: RetryBody | null =
    delays === null && age === null
      ? null
      : { ...(delays === null ? {} : { schedule: delays }), ...(age === null ? {} : { max_age: age }) };
  if (webhook === undefined) return typed ?? undefined;
  // An engine from before retry policies answers none: the same as the installation's schedule.
  const current = webhook.retry ?? null;
  const same =
    typed === null
      ? current === null
      : current !== null &&
        (current.schedule ?? null)?.join(',') === (typed.schedule ?? null)?.join(',') &&
        (current.max_age ?? null) === (typed.max_age ?? null);
  return same ? undefined : typed;
}

/** The paths typed in the form (`data.status, data.pricing`), or null when none is. */
function fieldsOf(text: string): string[] | null {
  const paths = text.split(/[\s,]+/).filter((path) => path !== '');
  return paths.length === 0 ? null : paths;
}

/** What a save sends for the include_fields field: as retryChange, for a list of paths. */
export function includeFieldsChange(
  webhook: Pick<Webhook, 'include_fields'> | undefined,
  text: string,
): string[] | null | undefined {
  const typed = fieldsOf(text);
  if (webhook === undefined) return typed ?? undefined;
  return (typed ?? []).join(',') === (webhook.include_fields ?? []).join(',') ? undefined : typed;
}

/** The webhook's retry policy in words, for its card. */
export function retryText(webhook: Pick<Webhook, 'retry'>): string {
  const retry = webhook.retry ?? null;
  if (retry === null) return 'The installation’s schedule';
  const schedule =
    retry.schedule === null ? 'the installation’s schedule' : `retries after ${retry.schedule.join(', ')}`;
  const parts = [schedule.charAt(0).toUpperCase() + schedule.slice(1)];
  if (retry.max_age !== null) parts.push(`not sent after ${retry.max_age}`);
  return parts.join('; ');
}
