import type { AttemptOutcome } from '../domain/delivery.js';
import type { SendResult } from './http-sender.js';

/** What the worker does with a delivery after an attempt. */
export type Decision = { action: 'delivered' } | { action: 'retry'; delayMs: number } | { action: 'dead' } | { action: 'disable'; reason: 'gone' };

export interface DecideInput {
  result: SendResult;
  /** Attempts made so far, this one included (1-based). */
  attemptsMade: number;
  /** The delay before each attempt; its length is the number of attempts and [0] precedes the first. */
  scheduleMs: readonly number[];
  nowMs: number;
  /** A source of numbers in [0, 1) for the jitter. */
  random: () => number;
}

const SECOND_MS = 1_000;
const DAY_MS = 24 * 60 * 60 * SECOND_MS;
const JITTER_FRACTION = 0.2;
/** The longest a receiver's Retry-After can hold a delivery back. */
const RETRY_AFTER_MAX_MS = DAY_MS;

/** 2xx → delivered, 3xx/4xx/5xx by class, an error by its class; a status outside 200-499 counts as a 5xx. */
export function attemptOutcome(result: SendResult): AttemptOutcome {
  if (result.kind === 'error') return result.errorClass;
  const { status } = result;
  if (status >= 200 && status < 300) return 'delivered';
  if (status >= 300 && status < 400) return 'http_3xx';
  if (status >= 400 && status < 500) return 'http_4xx';
  return 'http_5xx';
}

/**
 * The delivery rules: 2xx is delivered; 410 Gone disables the webhook at once; anything else retries
 * after the next scheduled delay (±20 % jitter) while attempts remain, and is dead after the last one.
 * A 429 or 503 with a valid Retry-After waits what the receiver asked instead (no jitter), longer or
 * shorter than the schedule: never earlier than asked, up to a ceiling of 24 h or the end of the
 * retry window, whichever is sooner. The retry window ends when the schedule's last attempt would
 * come, i.e. the sum of its delays after this attempt. The attempts after that one follow the
 * schedule again.
 */
export function decide(input: DecideInput): Decision {
  const { result, attemptsMade, scheduleMs, nowMs, random } = input;
  if (!Number.isSafeInteger(attemptsMade) || attemptsMade < 1) {
    throw new RangeError('attemptsMade must be a positive integer');
  }
  const outcome = attemptOutcome(result);
  if (outcome === 'delivered') return { action: 'delivered' };
  if (result.kind === 'response' && result.status === 410) return { action: 'disable', reason: 'gone' };

  const nextMs = scheduleMs[attemptsMade];
  if (nextMs === undefined) return { action: 'dead' };

  if (result.kind === 'response' && (result.status === 429 || result.status === 503)) {
    const askedMs = parseRetryAfterMs(result.retryAfter, nowMs);
    if (askedMs !== undefined) {
      // A receiver that asks for more than the schedule has left gets the last attempt's time, so a
      // huge Retry-After cannot keep a delivery pending past its schedule (or a day).
      const windowEndMs = retryWindowMs(scheduleMs, attemptsMade);
      return { action: 'retry', delayMs: Math.min(askedMs, windowEndMs, RETRY_AFTER_MAX_MS) };
    }
  }
  return { action: 'retry', delayMs: jitteredDelayMs(nextMs, random) };
}

/** The retry window still ahead after `attemptsMade` attempts: the sum of the schedule's delays to come (the whole window for 0). */
export function retryWindowMs(scheduleMs: readonly number[], attemptsMade = 0): number {
  return scheduleMs.slice(attemptsMade).reduce((sum, ms) => sum + ms, 0);
}

const IMF_FIXDATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
const RFC850_DATE = /^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{2})-([A-Z][a-z]{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
const ASCTIME_DATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/**
 * A Retry-After header as milliseconds from `nowMs`: delta-seconds, or an HTTP-date (IMF-fixdate,
 * RFC 850 or asctime, all GMT) where a past date means 0. Undefined when absent or malformed.
 */
export function parseRetryAfterMs(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * SECOND_MS;
  const dateMs = httpDateMs(text, nowMs);
  return dateMs === undefined ? undefined : Math.max(0, dateMs - nowMs);
}

/** `baseMs` spread uniformly over ±20 %, rounded to whole milliseconds. */
export function jitteredDelayMs(baseMs: number, random: () => number): number {
  return Math.round(baseMs * (1 - JITTER_FRACTION + 2 * JITTER_FRACTION * random()));
}

type DateParts = [day: string, month: string, year: string, hours: string, minutes: string, seconds: string];

/** The groups of `match` at these positions, as day, month, year, hours, minutes, seconds. */
function pick(match: RegExpExecArray, ...positions: number[]): DateParts {
  return positions.map((i) => match[i] ?? '') as DateParts;
}

function httpDateMs(text: string, nowMs: number): number | undefined {
  const imf = IMF_FIXDATE.exec(text);
  const rfc850 = imf ? null : RFC850_DATE.exec(text);
  const asctime = imf || rfc850 ? null : ASCTIME_DATE.exec(text);
  const parts = imf ? pick(imf, 1, 2, 3, 4, 5, 6) : rfc850 ? pick(rfc850, 1, 2, 3, 4, 5, 6) : asctime ? pick(asctime, 2, 1, 6, 3, 4, 5) : undefined;
  if (parts === undefined) return undefined;
  const [day, month, yearText, hours, minutes, seconds] = parts;
  let year = Number(yearText);
  if (rfc850) {
    // RFC 9110: a two-digit year that would be more than 50 years ahead is in the past century.
    const nowYear = new Date(nowMs).getUTCFullYear();
    year += Math.floor(nowYear / 100) * 100;
    if (year > nowYear + 50) year -= 100;
  }
  const fields = [year, MONTHS.indexOf(month), Number(day), Number(hours), Number(minutes), Number(seconds)] as const;
  const ms = Date.UTC(...fields);
  // Date.UTC rolls 31 Feb over into March and 25:00 into the next day; such a date is malformed.
  const back = new Date(ms);
  const roundTrip = [back.getUTCFullYear(), back.getUTCMonth(), back.getUTCDate(), back.getUTCHours(), back.getUTCMinutes(), back.getUTCSeconds()];
  return roundTrip.every((value, i) => value === fields[i]) ? ms : undefined;
}
