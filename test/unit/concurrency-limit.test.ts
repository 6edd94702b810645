import { describe, expect, it } from 'vitest';
import { ConcurrencyLimit, PAUSE_MS_MAX } from '../../src/domain/concurrency-limit.js';

const NOW = 1_764_000_000_000;

/** Starts `n` attempts; their tickets (fails the test when one is refused). */
function startMany(limits: ConcurrencyLimit, n: number, ceiling = 20): number[] {
  return Array.from({ length: n }, () => {
    const admission = limits.tryStart(ceiling, NOW);
    if (!admission.started) throw new Error(`refused: ${admission.reason}`);
    return admission.ticket;
  });
}

/** Runs a round of `n` concurrent attempts that all succeed; the limit after it. */
function round(limits: ConcurrencyLimit, n: number): number | undefined {
  for (const ticket of startMany(limits, n)) limits.end(ticket, 'ok', 20);
  return limits.view(NOW)?.limit;
}

describe('ConcurrencyLimit (AIMD, one endpoint’s)', () => {
  it('starts at the ceiling and refuses the attempt past it', () => {
    const limits = new ConcurrencyLimit();
    startMany(limits, 20);
    expect(limits.tryStart(20, NOW)).toEqual({ started: false, reason: 'full' });
    expect(limits.view(NOW)).toEqual({ limit: 20, inflight: 20, pausedUntilMs: undefined });
  });

  it('halves once per burst of push-backs, then grows by one per window, gently near the limit that pushed back', () => {
    const limits = new ConcurrencyLimit();
    const burst = startMany(limits, 16);
    expect(limits.end(burst[0]!, 'congested', 20)).toEqual({ limit: 10, decreased: true });
    // Started before that decrease: the same congestion, answered already.
    for (const ticket of burst.slice(1)) expect(limits.end(ticket, 'congested', 20).decreased).toBe(false);
    expect(limits.view(NOW)).toMatchObject({ limit: 10, inflight: 0 });
    // One increase per window of `limit` counted successes (those that started with half the limit
    // in use: 6 of a round of 10, 6 of 11).
    expect([round(limits, 10), round(limits, 10), round(limits, 11), round(limits, 11)]).toEqual([10, 11, 11, 12]);
    // A push-back at 12 halves to 6; back up to 10 a window each, then at 11 (just under 12) eight windows per increase.
    const [ticket] = startMany(limits, 1);
    expect(limits.end(ticket!, 'congested', 20).limit).toBe(6);
    const climb: (number | undefined)[] = [];
    for (let i = 0; i < 20; i += 1) climb.push(round(limits, limits.view(NOW).limit));
    expect(climb.indexOf(11)).toBeGreaterThan(0);
    const roundsAt11 = climb.filter((limit) => limit === 11).length;
    const roundsAt10 = climb.filter((limit) => limit === 10).length;
    expect(roundsAt11).toBeGreaterThanOrEqual(3 * roundsAt10);
  });

  it('a push-back of an attempt started after the decrease halves again; never below 1', () => {
    const limits = new ConcurrencyLimit();
    for (const expected of [10, 5, 2, 1, 1]) {
      const [ticket] = startMany(limits, 1);
      expect(limits.end(ticket!, 'congested', 20).limit).toBe(expected);
    }
    startMany(limits, 1);
    expect(limits.tryStart(20, NOW)).toEqual({ started: false, reason: 'full' });
  });

  it('never grows past the ceiling and admits under the smaller of limit and ceiling', () => {
    const limits = new ConcurrencyLimit();
    expect(limits.tryStart(3, NOW).started).toBe(true);
    startMany(limits, 2, 3);
    expect(limits.tryStart(3, NOW)).toEqual({ started: false, reason: 'full' });
    expect(limits.tryStart(2, NOW)).toEqual({ started: false, reason: 'full' });
    const capped = new ConcurrencyLimit();
    for (let i = 0; i < 50; i += 1) for (const ticket of startMany(capped, 3, 3)) capped.end(ticket, 'ok', 3);
    expect(capped.view(NOW)?.limit).toBe(3);
  });

  it('does not grow on a trickle that never uses half the limit, nor on neutral outcomes', () => {
    const limits = new ConcurrencyLimit();
    const [ticket] = startMany(limits, 1);
    limits.end(ticket!, 'congested', 20);
    for (let i = 0; i < 50; i += 1) limits.end(startMany(limits, 1)[0]!, 'ok', 20);
    expect(limits.view(NOW)?.limit).toBe(10);
    for (let i = 0; i < 10; i += 1) for (const t of startMany(limits, 10)) limits.end(t, 'neutral', 20);
    expect(limits.view(NOW)?.limit).toBe(10);
  });

  it('a cancelled attempt frees its place and counts for nothing', () => {
    const limits = new ConcurrencyLimit();
    const tickets = startMany(limits, 4);
    limits.cancel(tickets[0]!);
    expect(limits.view(NOW)).toMatchObject({ limit: 20, inflight: 3 });
    expect(limits.end(tickets[0]!, 'congested', 20).decreased).toBe(false);
  });

  it('a pause refuses every start until it ends, is capped at 5 min, and a shorter one never cuts it', () => {
    const limits = new ConcurrencyLimit();
    expect(limits.pause(NOW + 10_000, NOW)).toBe(NOW + 10_000);
    expect(limits.pause(NOW + 2_000, NOW)).toBe(NOW + 10_000);
    // Heard before any attempt: no limit yet.
    expect(limits.view(NOW)).toEqual({ limit: 0, inflight: 0, pausedUntilMs: NOW + 10_000 });
    expect(limits.tryStart(20, NOW + 9_999)).toEqual({ started: false, reason: 'paused', untilMs: NOW + 10_000 });
    expect(limits.room(NOW + 9_999)).toBe(0);
    expect(limits.tryStart(20, NOW + 10_000).started).toBe(true);
    expect(limits.pause(NOW + 3_600_000, NOW)).toBe(NOW + PAUSE_MS_MAX);
    expect(limits.view(NOW)?.pausedUntilMs).toBe(NOW + PAUSE_MS_MAX);
    expect(limits.view(NOW + PAUSE_MS_MAX)?.pausedUntilMs).toBeUndefined();
  });

  it('a limit no attempt has set yet has room', () => {
    const limits = new ConcurrencyLimit();
    expect(limits.room(NOW)).toBe(Infinity);
    startMany(limits, 20);
    expect(limits.room(NOW)).toBe(0);
  });

  it('is idle with nothing in flight and no pause', () => {
    const limits = new ConcurrencyLimit();
    expect(limits.idle(NOW)).toBe(true);
    const [ticket] = startMany(limits, 1);
    expect(limits.idle(NOW)).toBe(false);
    limits.end(ticket!, 'ok', 20);
    expect(limits.idle(NOW)).toBe(true);
    limits.pause(NOW + 1_000, NOW);
    expect(limits.idle(NOW)).toBe(false);
    expect(limits.idle(NOW + 1_000)).toBe(true);
  });
});
