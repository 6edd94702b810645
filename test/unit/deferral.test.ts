import { describe, expect, it } from 'vitest';
import {
  planDeferral,
  type DeferralCase,
  type HoldBack,
  type NotAdmitted,
} from '../../src/delivery/endpoints/deferral.js';

const NOW = 1_764_000_000_000;
const RULES = { circuitHoldMs: 30_000, unprovenHoldMs: 40_000 };
const E = 'v-1 https://receiver.example';
/** A batch's delivery or a FIFO head: not spread. */
const BATCH: DeferralCase = { endpoint: E, dueAtMs: NOW, deferJitterMs: 0 };
/** A single job's: spread over 1 s. */
const SINGLE: DeferralCase = { endpoint: E, dueAtMs: NOW, deferJitterMs: 1_000 };

const deferred = (wakeOn: string | undefined, retryAtMs: number, reason: string): NotAdmitted =>
  ({ kind: 'deferred', wakeOn, retryAtMs, reason }) as NotAdmitted;

describe('planDeferral: when a delivery admission holds back comes back', () => {
  it.each<[string, HoldBack, DeferralCase, number, NotAdmitted]>([
    // An open circuit: back when it ends (spread by the job's jitter), unless past its due time by more than one open period.
    [
      'open, a batch',
      { by: 'circuit', reason: 'open', retryAtMs: NOW + 10_000 },
      BATCH,
      0.5,
      deferred(E, NOW + 10_000, 'open'),
    ],
    [
      'open, a single job',
      { by: 'circuit', reason: 'open', retryAtMs: NOW + 10_000 },
      SINGLE,
      0.5,
      deferred(E, NOW + 10_500, 'open'),
    ],
    [
      'open, ending exactly one open period after it was due',
      { by: 'circuit', reason: 'open', retryAtMs: NOW + 30_000 },
      BATCH,
      0.5,
      deferred(E, NOW + 30_000, 'open'),
    ],
    [
      'open, ending past that',
      { by: 'circuit', reason: 'open', retryAtMs: NOW + 30_001 },
      BATCH,
      0.5,
      { kind: 'circuit_open' },
    ],
    [
      'open, due long ago',
      { by: 'circuit', reason: 'open', retryAtMs: NOW + 1_000 },
      { ...BATCH, dueAtMs: NOW - 60_000 },
      0.5,
      { kind: 'circuit_open' },
    ],
    [
      'probing',
      { by: 'circuit', reason: 'probing', retryAtMs: NOW + 4_000 },
      BATCH,
      0.5,
      deferred(E, NOW + 4_000, 'probing'),
    ],
    // Unproven: held for long (the wakeups bring it back as soon as the endpoint answers), or until the contact in flight has ended.
    ['unproven, a batch', { by: 'unproven', retryAtMs: NOW + 5_100 }, BATCH, 0.5, deferred(E, NOW + 40_000, 'slow')],
    [
      'unproven, a single job',
      { by: 'unproven', retryAtMs: NOW + 5_100 },
      SINGLE,
      0.25,
      deferred(E, NOW + 40_250, 'slow'),
    ],
    [
      'unproven, the contact ends after the hold',
      { by: 'unproven', retryAtMs: NOW + 50_000 },
      BATCH,
      0.5,
      deferred(E, NOW + 50_000, 'slow'),
    ],
    // The suspect share taken: the hold plus up to 1 s.
    ['suspect share, a batch', { by: 'suspect_share' }, BATCH, 0.5, deferred(E, NOW + 40_500, 'slow')],
    // A pause: its end, spread by at least 1 s; nothing to wake it.
    ['paused, a batch', { by: 'paused', untilMs: NOW + 3_000 }, BATCH, 0.5, deferred(undefined, NOW + 3_500, 'paused')],
    [
      'paused, spread wider',
      { by: 'paused', untilMs: NOW + 3_000 },
      { ...SINGLE, deferJitterMs: 4_000 },
      0.5,
      deferred(undefined, NOW + 5_000, 'paused'),
    ],
    // A concurrency limit: 1 to 2 s, woken sooner as its attempts end.
    ['concurrency', { by: 'concurrency' }, BATCH, 0, deferred(E, NOW + 1_000, 'concurrency')],
    ['concurrency, at most', { by: 'concurrency' }, SINGLE, 0.999, deferred(E, NOW + 1_999, 'concurrency')],
    // A rate limit: its place in the line, unspread, nothing to wake it.
    ['rate limited', { by: 'rate', retryInMs: 1_234 }, SINGLE, 0.5, deferred(undefined, NOW + 1_234, 'rate_limited')],
  ])('%s', (_name, hold, delivery, random, expected) => {
    expect(planDeferral(hold, delivery, RULES, NOW, () => random)).toEqual(expected);
  });
});
