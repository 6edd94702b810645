import type { Interpretation } from './interpret.js';

/** What the worker does with a delivery after an attempt. */
export type Decision =
  | { action: 'delivered' }
  | { action: 'retry'; delayMs: number }
  | { action: 'dead' }
  | { action: 'disable'; reason: 'gone' };

export interface DecideInput {
  /** The attempt's answer, as `interpret` read it. */
  answer: Pick<Interpretation, 'action' | 'retryAfterMs'>;
  /** Attempts made so far, this one included (1-based). */
  attemptsMade: number;
  /** The delay before each attempt; its length is the number of attempts and [0] precedes the first. */
  scheduleMs: readonly number[];
  /** A source of numbers in [0, 1) for the jitter. */
  random: () => number;
}

const SECOND_MS = 1_000;
const DAY_MS = 24 * 60 * 60 * SECOND_MS;
const JITTER_FRACTION = 0.2;
/** The longest a receiver's Retry-After can hold a delivery back. */
const RETRY_AFTER_MAX_MS = DAY_MS;

/**
 * The delivery rules, over the answer as interpret.ts reads it: 2xx is delivered; 410 Gone disables
 * the webhook at once; anything else retries after the next scheduled delay (±20 % jitter) while
 * attempts remain, and is dead after the last one.
 * A 429 or 503 with a valid Retry-After waits what the receiver asked instead (no jitter), longer or
 * shorter than the schedule: never earlier than asked, up to a ceiling of 24 h or the end of the
 * retry window, whichever is sooner. The retry window ends when the schedule's last attempt would
 * come, i.e. the sum of its delays after this attempt. The attempts after that one follow the
 * schedule again.
 */
export function decide(input: DecideInput): Decision {
  const { answer, attemptsMade, scheduleMs, random } = input;
  if (!Number.isSafeInteger(attemptsMade) || attemptsMade < 1) {
    throw new RangeError('attemptsMade must be a positive integer');
  }
  if (answer.action === 'delivered') return { action: 'delivered' };
  if (answer.action === 'disable') return { action: 'disable', reason: 'gone' };

  const nextMs = scheduleMs[attemptsMade];
  if (nextMs === undefined) return { action: 'dead' };

  if (answer.retryAfterMs !== undefined) {
    // A receiver that asks for more than the schedule has left gets the last attempt's time, so a
    // huge Retry-After cannot keep a delivery pending past its schedule (or a day).
    const windowEndMs = retryWindowMs(scheduleMs, attemptsMade);
    return { action: 'retry', delayMs: Math.min(answer.retryAfterMs, windowEndMs, RETRY_AFTER_MAX_MS) };
  }
  return { action: 'retry', delayMs: jitteredDelayMs(nextMs, random) };
}

/** The retry window still ahead after `attemptsMade` attempts: the sum of the schedule's delays to come (the whole window for 0). */
export function retryWindowMs(scheduleMs: readonly number[], attemptsMade = 0): number {
  return scheduleMs.slice(attemptsMade).reduce((sum, ms) => sum + ms, 0);
}

/** `baseMs` spread uniformly over ±20 %, rounded to whole milliseconds. */
export function jitteredDelayMs(baseMs: number, random: () => number): number {
  return Math.round(baseMs * (1 - JITTER_FRACTION + 2 * JITTER_FRACTION * random()));
}
