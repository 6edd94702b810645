/**
 * What the range replay form sends (POST /vendors/v1/webhooks/{id}/replay), apart from the page
 * (range-replay.tsx draws it), so the rules read in one place. The form counts first (a dry run) and
 * then replays what it counted: an empty "to" becomes the time of counting, fixed in the body, so
 * events accepted after the count are not in the replay the vendor confirmed.
 */

import { isoFromLocal, localFromMs } from './local-time.js';
import { DELIVERY_STATUSES, type DeliveryStatus } from './types.js';

/** The form as typed. */
export interface RangeForm {
  /** `datetime-local` values, in the browser's zone; an empty `until` means now. */
  since: string;
  until: string;
  /** The statuses checked; all of them (the default) means any. */
  statuses: DeliveryStatus[];
  /** Replays queued per second at most, as typed; empty: no pace. */
  rate: string;
}

export interface RangeReplayBody {
  since: string;
  until: string;
  statuses?: DeliveryStatus[];
  rate_per_second?: number;
}

/** How far back a new form starts: the last hour, every status, no pace. */
const DEFAULT_SPAN_MS = 3_600_000;

/** A new form at `nowMs`: from an hour ago (to the minute) until now, every status, no pace. */
export function newRangeForm(nowMs: number): RangeForm {
  return { since: localFromMs(nowMs - DEFAULT_SPAN_MS), until: '', statuses: [...DELIVERY_STATUSES], rate: '' };
}

/**
 * The replay's body for `form` at `nowMs`: times in UTC, an empty `until` as `nowMs`; no `statuses`
 * when every one is checked (the API then takes any); the rate as a number, left to the API to
 * judge. Throws, in words for the page, what the form itself can tell is missing; the API answers
 * the rest (from after to, a rate out of range) with a 400 that names the field.
 */
export function rangeReplayBody(form: RangeForm, nowMs: number): RangeReplayBody {
  const since = isoFromLocal(form.since);
  if (since === undefined) throw new Error('Choose the date and time the range starts from.');
  const until = form.until === '' ? new Date(nowMs).toISOString() : isoFromLocal(form.until);
  if (until === undefined) throw new Error('The time the range ends is not a date and time; empty means now.');
  const statuses = DELIVERY_STATUSES.filter((status) => form.statuses.includes(status));
  if (statuses.length === 0) throw new Error('Check at least one status.');
  const rate = form.rate.trim();
  return {
    since,
    until,
    ...(statuses.length === DELIVERY_STATUSES.length ? {} : { statuses }),
    ...(rate === '' ? {} : { rate_per_second: Number(rate) }),
  };
}
