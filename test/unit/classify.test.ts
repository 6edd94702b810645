import { describe, expect, it } from 'vitest';
import { decide, jitteredDelayMs, type Decision } from '../../src/delivery/classify.js';
import { interpret, parseRetryAfterMs } from '../../src/delivery/interpret.js';
import type { SendResult } from '../../src/delivery/outbound/http-sender.js';
import { failure, response } from '../helpers/send-results.js';

const S = 1_000;
const M = 60 * S;
const H = 60 * M;
/** The default schedule: 0, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h. */
const SCHEDULE = [0, 5 * S, 5 * M, 30 * M, 2 * H, 5 * H, 10 * H, 14 * H, 20 * H, 24 * H];
const NOW = Date.UTC(2025, 0, 2, 3, 4, 5);
const MIDDLE = () => 0.5;

function decided(
  result: SendResult,
  attemptsMade: number,
  random: () => number = MIDDLE,
  scheduleMs = SCHEDULE,
): Decision {
  return decide({ answer: interpret(result, NOW), attemptsMade, scheduleMs, random });
}

describe('interpret(…).outcome', () => {
  it.each<[SendResult, string]>([
    [response(200), 'delivered'],
    [response(201), 'delivered'],
    [response(204), 'delivered'],
    [response(299), 'delivered'],
    [response(301), 'http_3xx'],
    [response(302), 'http_3xx'],
    [response(304), 'http_3xx'],
    [response(400), 'http_4xx'],
    [response(404), 'http_4xx'],
    [response(410), 'http_4xx'],
    [response(429), 'http_4xx'],
    [response(500), 'http_5xx'],
    [response(503), 'http_5xx'],
    [response(599), 'http_5xx'],
    [response(600), 'http_5xx'],
    [response(199), 'http_5xx'],
    [failure('timeout'), 'timeout'],
    [failure('dns'), 'dns'],
    [failure('connect'), 'connect'],
    [failure('tls'), 'tls'],
    [failure('ssrf_blocked'), 'ssrf_blocked'],
    [failure('network'), 'network'],
  ])('%o → %s', (result, outcome) => {
    expect(interpret(result, NOW).outcome).toBe(outcome);
  });
});

describe('decide', () => {
  it('delivers any 2xx, even on the last attempt', () => {
    expect(decided(response(200), 1)).toEqual({ action: 'delivered' });
    expect(decided(response(204), 10)).toEqual({ action: 'delivered' });
  });

  it('disables at once on 410 Gone, whatever attempts remain', () => {
    expect(decided(response(410), 1)).toEqual({ action: 'disable', reason: 'gone' });
    expect(decided(response(410), 10)).toEqual({ action: 'disable', reason: 'gone' });
  });

  it('retries after the next scheduled delay, with the jitter of the random source', () => {
    expect(decided(response(500), 1)).toEqual({ action: 'retry', delayMs: 5 * S });
    expect(decided(response(500), 1, () => 0)).toEqual({ action: 'retry', delayMs: 4 * S });
    expect(decided(response(500), 1, () => 0.999_999)).toEqual({ action: 'retry', delayMs: 6 * S });
    expect(decided(response(500), 2, () => 0.25)).toEqual({ action: 'retry', delayMs: 270 * S });
    expect(decided(response(500), 9)).toEqual({ action: 'retry', delayMs: 24 * H });
  });

  it.each<[string, SendResult]>([
    ['302', response(302)],
    ['400', response(400)],
    ['401', response(401)],
    ['404', response(404)],
    ['429 without Retry-After', response(429)],
    ['500', response(500)],
    ['timeout', failure('timeout')],
    ['dns', failure('dns')],
    ['connect', failure('connect')],
    ['tls', failure('tls')],
    ['ssrf_blocked', failure('ssrf_blocked')],
    ['network', failure('network')],
  ])('%s retries while attempts remain, and is dead after the last', (_, result) => {
    expect(decided(result, 3)).toEqual({ action: 'retry', delayMs: 30 * M });
    expect(decided(result, 10)).toEqual({ action: 'dead' });
    expect(decided(result, 11)).toEqual({ action: 'dead' });
  });

  it('is dead after the only attempt of a one-attempt schedule', () => {
    expect(decided(response(500), 1, MIDDLE, [0])).toEqual({ action: 'dead' });
  });

  it('honours Retry-After on 429 and 503 exactly (no jitter), however much longer than the next delay', () => {
    expect(decided(response(429, '7'), 1, () => 0)).toEqual({ action: 'retry', delayMs: 7 * S });
    expect(decided(response(503, '7'), 1, () => 0.99)).toEqual({ action: 'retry', delayMs: 7 * S });
    // Scheduled 1 s, asked 3 s: never earlier than asked.
    expect(decided(response(429, '3'), 1, MIDDLE, [0, 1 * S, 5 * M])).toEqual({ action: 'retry', delayMs: 3 * S });
    expect(decided(response(503, '3'), 1, MIDDLE, [0, 1 * S, 5 * M])).toEqual({ action: 'retry', delayMs: 3 * S });
    // Next delay 5 s: 60 s and an hour are what the receiver asked.
    expect(decided(response(429, '60'), 1)).toEqual({ action: 'retry', delayMs: 60 * S });
    expect(decided(response(503, '3600'), 2)).toEqual({ action: 'retry', delayMs: 1 * H });
    // An HTTP-date 90 s ahead, with 5 s scheduled, is 90 s.
    expect(decided(response(503, 'Thu, 02 Jan 2025 03:05:35 GMT'), 1)).toEqual({ action: 'retry', delayMs: 90 * S });
    // Next delay 5 min: an HTTP-date 30 s ahead is 30 s.
    expect(decided(response(503, 'Thu, 02 Jan 2025 03:04:35 GMT'), 2)).toEqual({ action: 'retry', delayMs: 30 * S });
    // A shorter wait than the schedule is honoured too; a past date means now.
    expect(decided(response(429, '0'), 5)).toEqual({ action: 'retry', delayMs: 0 });
    expect(decided(response(429, 'Wed, 01 Jan 2025 00:00:00 GMT'), 5)).toEqual({ action: 'retry', delayMs: 0 });
  });

  it('leaves the attempts after a Retry-After on the schedule', () => {
    expect(decided(response(429, '3600'), 1)).toEqual({ action: 'retry', delayMs: 1 * H });
    expect(decided(response(500), 2)).toEqual({ action: 'retry', delayMs: 5 * M });
  });

  it('caps Retry-After at 24 h', () => {
    // From the first attempt the rest of the schedule spans about 76 h: 24 h is the smaller ceiling.
    expect(decided(response(429, '99999999999999999999'), 1)).toEqual({ action: 'retry', delayMs: 24 * H });
    expect(decided(response(503, 'Fri, 03 Jan 2025 05:04:05 GMT'), 1)).toEqual({ action: 'retry', delayMs: 24 * H });
    expect(decided(response(429, '200000'), 7)).toEqual({ action: 'retry', delayMs: 24 * H });
    expect(decided(response(429, '99999999999999999999'), 9)).toEqual({ action: 'retry', delayMs: 24 * H });
  });

  it('caps Retry-After at the end of the retry window: when the schedule’s last attempt would come', () => {
    // Remaining delays after the first attempt: 1 s + 2 s + 3 s = 6 s.
    expect(decided(response(429, '60'), 1, MIDDLE, [0, 1 * S, 2 * S, 3 * S])).toEqual({
      action: 'retry',
      delayMs: 6 * S,
    });
    expect(decided(response(429, '5'), 1, MIDDLE, [0, 1 * S, 2 * S, 3 * S])).toEqual({
      action: 'retry',
      delayMs: 5 * S,
    });
    // After the third, only 3 s remain.
    expect(decided(response(503, '60'), 3, MIDDLE, [0, 1 * S, 2 * S, 3 * S])).toEqual({
      action: 'retry',
      delayMs: 3 * S,
    });
    // Default schedule, attempt 8: 20 h + 24 h remain, so 24 h still caps; attempt 9: 24 h remain.
    expect(decided(response(429, '172800'), 8)).toEqual({ action: 'retry', delayMs: 24 * H });
    // A schedule of zeros has no window to wait in: the retry comes at once.
    expect(decided(response(429, '10'), 1, MIDDLE, [0, 0, 0])).toEqual({ action: 'retry', delayMs: 0 });
    expect(decided(response(500), 1, MIDDLE, [0, 0, 0])).toEqual({ action: 'retry', delayMs: 0 });
  });

  it('ignores Retry-After on other statuses and when it is malformed', () => {
    expect(decided(response(500, '1'), 2)).toEqual({ action: 'retry', delayMs: 5 * M });
    expect(decided(response(502, '1'), 2)).toEqual({ action: 'retry', delayMs: 5 * M });
    expect(decided(response(429, 'soon'), 2)).toEqual({ action: 'retry', delayMs: 5 * M });
    expect(decided(response(503, '-5'), 2)).toEqual({ action: 'retry', delayMs: 5 * M });
  });

  it('still dead-letters a 429 with Retry-After after the last attempt', () => {
    expect(decided(response(429, '5'), 10)).toEqual({ action: 'dead' });
  });

  it('refuses an attempt count below 1', () => {
    expect(() => decided(response(500), 0)).toThrow(RangeError);
    expect(() => decided(response(500), 1.5)).toThrow(RangeError);
  });
});

describe('parseRetryAfterMs', () => {
  it.each<[string | undefined, number | undefined]>([
    ['120', 120 * S],
    [' 5 ', 5 * S],
    ['0', 0],
    ['007', 7 * S],
    // The three HTTP-date forms of RFC 9110, all 90 s after NOW.
    ['Thu, 02 Jan 2025 03:05:35 GMT', 90 * S],
    ['Thursday, 02-Jan-25 03:05:35 GMT', 90 * S],
    ['Thu Jan  2 03:05:35 2025', 90 * S],
    ['Fri, 03 Jan 2025 03:04:05 GMT', 24 * H],
    ['Thu, 02 Jan 2025 03:04:05 GMT', 0],
    ['Sun, 06 Nov 1994 08:49:37 GMT', 0],
    [undefined, undefined],
    ['', undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['1e3', undefined],
    ['soon', undefined],
    ['Thu, 31 Feb 2025 03:05:35 GMT', undefined],
    ['Thu, 02 Jan 2025 24:05:35 GMT', undefined],
    ['Thu, 02 Foo 2025 03:05:35 GMT', undefined],
    ['Thu, 02 Jan 2025 03:05:35 UTC', undefined],
    ['2025-01-02T03:05:35Z', undefined],
  ])('%s → %s', (value, ms) => {
    expect(parseRetryAfterMs(value, NOW)).toBe(ms);
  });

  it('reads a two-digit RFC 850 year as at most 50 years ahead', () => {
    expect(parseRetryAfterMs('Sunday, 06-Nov-94 08:49:37 GMT', NOW)).toBe(0);
    const inTwentyYears = Date.UTC(2045, 0, 2, 3, 4, 5);
    expect(parseRetryAfterMs('Monday, 02-Jan-45 03:04:05 GMT', NOW)).toBe(inTwentyYears - NOW);
  });
});

describe('jitteredDelayMs', () => {
  it.each<[number, number, number]>([
    [5_000, 0, 4_000],
    [5_000, 0.5, 5_000],
    [5_000, 0.75, 5_500],
    [300_000, 0.1, 252_000],
    [0, 0.7, 0],
    [1, 0.9, 1],
  ])('%i ms with random %f → %i ms', (baseMs, r, expected) => {
    expect(jitteredDelayMs(baseMs, () => r)).toBe(expected);
  });

  it('stays within ±20 % over the whole range of the random source', () => {
    for (let i = 0; i < 1_000; i++) {
      const delay = jitteredDelayMs(86_400_000, () => i / 1_000);
      expect(delay).toBeGreaterThanOrEqual(0.8 * 86_400_000);
      expect(delay).toBeLessThan(1.2 * 86_400_000);
    }
  });
});
