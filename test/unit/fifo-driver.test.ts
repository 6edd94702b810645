import { describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import { fifoLeaseMs, IDLE_MAX_MS, IDLE_MIN_MS, nextIdleMs, planHead } from '../../src/delivery/fifo-driver.js';

const ACCEPTED_MS = 1_763_726_400_000;
const job: DeliverJob = {
  deliveryId: 'd-1',
  eventId: 'e-1',
  eventType: 'EVENT_TYPE_MACHINE_CREATED',
  vendorId: 'v',
  webhookId: 'w',
  body: '{}',
  acceptedAtMs: ACCEPTED_MS,
};
const SCHEDULE = [0, 5_000, 300_000];

describe('planHead', () => {
  it('attempts a head without a record as its first attempt, due at acceptance plus the first delay', () => {
    expect(planHead(job, undefined, SCHEDULE, ACCEPTED_MS)).toEqual({
      kind: 'attempt',
      attemptNo: 1,
      dueAtMs: ACCEPTED_MS,
    });
    expect(planHead(job, undefined, [2_000, 5_000], ACCEPTED_MS)).toEqual({
      kind: 'wait',
      untilMs: ACCEPTED_MS + 2_000,
    });
  });

  it('skips a head whose record is finished (its end recorded by a worker that died before removing it)', () => {
    for (const status of ['delivered', 'dead', 'dropped', 'replayed'] as const) {
      expect(
        planHead(job, { status, attempts: 2, nextAttemptAtMs: undefined, dueAtMs: undefined }, SCHEDULE, ACCEPTED_MS),
      ).toEqual({ kind: 'finished' });
    }
  });

  it('waits for a retry that is not due, and then attempts it as the attempt after those recorded', () => {
    const progress = {
      status: 'retrying' as const,
      attempts: 1,
      nextAttemptAtMs: ACCEPTED_MS + 5_000,
      dueAtMs: undefined,
    };
    expect(planHead(job, progress, SCHEDULE, ACCEPTED_MS + 1_000)).toEqual({
      kind: 'wait',
      untilMs: ACCEPTED_MS + 5_000,
    });
    // Within the tolerance for clock skew between workers it goes.
    expect(planHead(job, progress, SCHEDULE, ACCEPTED_MS + 4_950)).toEqual({
      kind: 'attempt',
      attemptNo: 2,
      dueAtMs: ACCEPTED_MS + 5_000,
    });
  });

  it('re-sends an attempt in flight when its worker died (nothing recorded) as the same attempt', () => {
    const progress = {
      status: 'retrying' as const,
      attempts: 2,
      nextAttemptAtMs: ACCEPTED_MS + 6_000,
      dueAtMs: undefined,
    };
    expect(planHead(job, progress, SCHEDULE, ACCEPTED_MS + 60_000)).toEqual({
      kind: 'attempt',
      attemptNo: 3,
      dueAtMs: ACCEPTED_MS + 6_000,
    });
  });

  it('keeps the schedule’s due time of a deferred head (a deferral moves when, not which attempt)', () => {
    const progress = {
      status: 'pending' as const,
      attempts: 0,
      nextAttemptAtMs: ACCEPTED_MS + 900,
      dueAtMs: ACCEPTED_MS,
    };
    expect(planHead(job, progress, SCHEDULE, ACCEPTED_MS + 900)).toEqual({
      kind: 'attempt',
      attemptNo: 1,
      dueAtMs: ACCEPTED_MS,
    });
  });
});

describe('fifoLeaseMs', () => {
  it('outlasts one attempt by a margin, and is never shorter than the job lock', () => {
    expect(fifoLeaseMs(15_000, 30_000)).toBe(30_000);
    expect(fifoLeaseMs(15_000, 5_000)).toBe(17_000);
    expect(fifoLeaseMs(1_000, 2_000)).toBe(3_000);
  });
});

describe('nextIdleMs', () => {
  it('doubles while idle, up to the ceiling', () => {
    expect(nextIdleMs(IDLE_MIN_MS, undefined)).toEqual({ waitMs: IDLE_MIN_MS, nextMs: 2 * IDLE_MIN_MS });
    expect(nextIdleMs(IDLE_MAX_MS, undefined)).toEqual({ waitMs: IDLE_MAX_MS, nextMs: IDLE_MAX_MS });
  });

  it('wakes for the next ready time when it comes sooner, never busier than the floor', () => {
    expect(nextIdleMs(IDLE_MAX_MS, 120).waitMs).toBe(120);
    expect(nextIdleMs(IDLE_MAX_MS, 0).waitMs).toBe(IDLE_MIN_MS);
    expect(nextIdleMs(100, 5_000).waitMs).toBe(100);
  });
});
