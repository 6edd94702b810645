import type { FlowSignal } from '../domain/concurrency-limit.js';
import type { AttemptErrorClass, AttemptOutcome } from '../domain/delivery.js';
import type { SendResult } from './outbound/http-sender.js';

/**
 * What a receiver's answer means, in one table: for the delivery (delivered, disable the webhook,
 * or retry, dead after the last attempt: see `decide`), for the endpoint's circuit breaker (its
 * health), for its adaptive concurrency limit (its flow signal) and for when to come back
 * (Retry-After). Every reader of an answer takes it from `interpret`, and the callback contract (the
 * OpenAPI webhooks section, docs/receiving-webhooks.md) is written from `READINGS`, so the rules,
 * the documentation and the tests cannot drift apart.
 *
 * Why the rows say what they say: a 429 is healthy for the breaker (the receiver is up and asks for
 * less, which the concurrency limit and a Retry-After pause answer; counted as failures, the 429s of
 * a burst past its capacity would open the circuit of a receiver that is merely busy), while a 503
 * is both a failure and push-back. Timeouts and connection failures are push-back too (an overloaded
 * receiver stops accepting or answering); a DNS or TLS failure says nothing about capacity. A
 * blocked address is the engine's refusal, not the receiver's failure.
 */

/** How an attempt ended, for the breaker: a response in time, a failure, or a timeout. */
export type AttemptHealth = 'healthy' | 'failed' | 'timeout';

/** What follows for the delivery: delivered; its webhook disabled (410 Gone); or retried, dead after the last attempt. */
export type AnswerAction = 'delivered' | 'disable' | 'retry';

/** What one attempt's answer (or its absence) means. */
export interface Interpretation {
  /** The attempt log's label and the outcome metrics. */
  outcome: AttemptOutcome;
  action: AnswerAction;
  health: AttemptHealth;
  flow: FlowSignal;
  /** An HTTP response of any status: the endpoint has answered, which other workers may learn. */
  answered: boolean;
  /** The wait the receiver asked for (a 429 or 503's Retry-After), from the answer; undefined: none to honour. */
  retryAfterMs: number | undefined;
}

/** One row of the table: the answers it covers, and what they mean. */
export interface Reading extends Interpretation {
  /** The answers, as the callback contract names them: a status, a range (`4XX`: the rest of it), or an error class. */
  answer: string;
  /** Whether a Retry-After header on this answer sets the next attempt's delay and pauses the endpoint. */
  honoursRetryAfter: boolean;
  description: string;
  retryAfterMs: undefined;
}

const RETRY_AFTER =
  'Its Retry-After (seconds or an HTTP date) sets the next attempt’s delay (at most 24 h, and never past the last scheduled attempt) ' +
  'and pauses the endpoint for every worker (at most 5 min).';

type Row = Omit<Reading, 'answered' | 'retryAfterMs' | 'honoursRetryAfter'> & { honoursRetryAfter?: true };

/** A row of HTTP answers (`answered`) or of answers that never came. */
const reading = (answered: boolean, r: Row): Reading => ({
  honoursRetryAfter: false,
  ...r,
  answered,
  retryAfterMs: undefined,
});
const status = (r: Row) => reading(true, r);
const noAnswer = (r: Row) => reading(false, r);

/** HTTP answers, most specific first (`statusReading` picks the row). */
const STATUS_ROWS = {
  success: status({
    answer: '2XX',
    outcome: 'delivered',
    action: 'delivered',
    health: 'healthy',
    flow: 'ok',
    description:
      'Delivered: any 2xx within the attempt timeout (15 s by default). The body is ignored; its first 4 KiB are kept in the attempt log.',
  }),
  gone: status({
    answer: '410',
    outcome: 'http_4xx',
    action: 'disable',
    health: 'healthy',
    flow: 'ok',
    description:
      'Gone: the webhook is disabled at once (disabled_reason gone) and this delivery is not retried. PATCH enabled=true turns it back on.',
  }),
  tooMany: status({
    answer: '429',
    outcome: 'http_4xx',
    action: 'retry',
    health: 'healthy',
    flow: 'congested',
    honoursRetryAfter: true,
    description: `Too many requests: not a failure of the endpoint, but it halves the endpoint’s concurrency limit. ${RETRY_AFTER}`,
  }),
  unavailable: status({
    answer: '503',
    outcome: 'http_5xx',
    action: 'retry',
    health: 'failed',
    flow: 'congested',
    honoursRetryAfter: true,
    description: `Unavailable: a failure of the endpoint, and it halves the concurrency limit. ${RETRY_AFTER}`,
  }),
  redirect: status({
    answer: '3XX',
    outcome: 'http_3xx',
    action: 'retry',
    health: 'healthy',
    flow: 'ok',
    description: 'A redirect: not followed; retried.',
  }),
  clientError: status({
    answer: '4XX',
    outcome: 'http_4xx',
    action: 'retry',
    health: 'healthy',
    flow: 'ok',
    description: 'Any other 4xx: retried; the receiver is up, so not a failure of the endpoint.',
  }),
  serverError: status({
    answer: '5XX',
    outcome: 'http_5xx',
    action: 'retry',
    health: 'failed',
    flow: 'neutral',
    description: 'Any other status (5xx, or outside 200-599): a failure of the endpoint; retried.',
  }),
} as const;

/** No HTTP answer: the sender's error classes, and `circuit_open`, recorded without sending. */
const ERROR_ROWS: Record<AttemptErrorClass, Reading> = {
  timeout: noAnswer({
    answer: 'timeout',
    outcome: 'timeout',
    action: 'retry',
    health: 'timeout',
    flow: 'congested',
    description:
      'No answer within the attempt timeout: a timeout (two in a row open the circuit), and it halves the concurrency limit; retried.',
  }),
  connect: noAnswer({
    answer: 'connect',
    outcome: 'connect',
    action: 'retry',
    health: 'failed',
    flow: 'congested',
    description: 'The connection failed or was refused: a failure, and it halves the concurrency limit; retried.',
  }),
  network: noAnswer({
    answer: 'network',
    outcome: 'network',
    action: 'retry',
    health: 'failed',
    flow: 'congested',
    description: 'The connection broke during the request: a failure, and it halves the concurrency limit; retried.',
  }),
  dns: noAnswer({
    answer: 'dns',
    outcome: 'dns',
    action: 'retry',
    health: 'failed',
    flow: 'neutral',
    description: 'The host name did not resolve: a failure; retried.',
  }),
  tls: noAnswer({
    answer: 'tls',
    outcome: 'tls',
    action: 'retry',
    health: 'failed',
    flow: 'neutral',
    description: 'The TLS handshake failed: a failure; retried.',
  }),
  auth: noAnswer({
    answer: 'auth',
    outcome: 'auth',
    action: 'retry',
    health: 'failed',
    flow: 'neutral',
    description:
      'Not sent: the webhook’s OAuth2 token endpoint gave no token (refused, unreachable or a bad answer): a failure; retried.',
  }),
  ssrf_blocked: noAnswer({
    answer: 'ssrf_blocked',
    outcome: 'ssrf_blocked',
    action: 'retry',
    health: 'healthy',
    flow: 'neutral',
    description: 'Not sent: the address is blocked by the SSRF guard, which is no failure of the receiver; retried.',
  }),
  // Never sent, so it tells the endpoint's breaker and limit nothing: it only takes its place on the schedule.
  circuit_open: noAnswer({
    answer: 'circuit_open',
    outcome: 'circuit_open',
    action: 'retry',
    health: 'healthy',
    flow: 'neutral',
    description:
      'Not sent: the attempt came due while the endpoint’s circuit was open; recorded, it counts on the schedule. ' +
      'Never a delivery’s last attempt: that one is sent, as the circuit’s probe if need be.',
  }),
};

/** The whole table, HTTP answers first. */
export const READINGS: readonly Reading[] = [...Object.values(STATUS_ROWS), ...Object.values(ERROR_ROWS)];

function statusReading(status: number): Reading {
  if (status >= 200 && status < 300) return STATUS_ROWS.success;
  if (status === 410) return STATUS_ROWS.gone;
  if (status === 429) return STATUS_ROWS.tooMany;
  if (status === 503) return STATUS_ROWS.unavailable;
  if (status >= 300 && status < 400) return STATUS_ROWS.redirect;
  if (status >= 400 && status < 500) return STATUS_ROWS.clientError;
  return STATUS_ROWS.serverError;
}

/**
 * What `result` means, read at `nowMs` (a Retry-After date is counted from it). Allocates only for
 * an honoured Retry-After: every other answer is its table row.
 */
export function interpret(result: SendResult, nowMs: number): Interpretation {
  if (result.kind === 'error') return ERROR_ROWS[result.errorClass];
  const reading = statusReading(result.status);
  if (!reading.honoursRetryAfter) return reading;
  const retryAfterMs = parseRetryAfterMs(result.retryAfter, nowMs);
  return retryAfterMs === undefined ? reading : { ...reading, retryAfterMs };
}

const SECOND_MS = 1_000;
const IMF_FIXDATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d{2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
const RFC850_DATE =
  /^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d{2})-([A-Z][a-z]{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/;
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

type DateParts = [day: string, month: string, year: string, hours: string, minutes: string, seconds: string];

/** The groups of `match` at these positions, as day, month, year, hours, minutes, seconds. */
function pick(match: RegExpExecArray, ...positions: number[]): DateParts {
  return positions.map((i) => match[i] ?? '') as DateParts;
}

function httpDateMs(text: string, nowMs: number): number | undefined {
  const imf = IMF_FIXDATE.exec(text);
  const rfc850 = imf ? null : RFC850_DATE.exec(text);
  const asctime = imf || rfc850 ? null : ASCTIME_DATE.exec(text);
  const parts = imf
    ? pick(imf, 1, 2, 3, 4, 5, 6)
    : rfc850
      ? pick(rfc850, 1, 2, 3, 4, 5, 6)
      : asctime
        ? pick(asctime, 2, 1, 6, 3, 4, 5)
        : undefined;
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
  const roundTrip = [
    back.getUTCFullYear(),
    back.getUTCMonth(),
    back.getUTCDate(),
    back.getUTCHours(),
    back.getUTCMinutes(),
    back.getUTCSeconds(),
  ];
  return roundTrip.every((value, i) => value === fields[i]) ? ms : undefined;
}
