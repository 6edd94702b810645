import { describe, expect, it } from 'vitest';
import { BatchHolds, type BatchHoldRules } from '../../src/delivery/batch-holds.js';

/** The production rules (docs/delivery-semantics.md): checks every 250 ms, 50 ms once only suspect deliveries are left, 2 s for any attempt, 15 s timeout. */
const RULES: BatchHoldRules = {
  batchHoldMs: 2_000,
  suspectHoldMs: 250,
  suspectOnlyHoldMs: 50,
  deliveryTimeoutMs: 15_000,
};

/** A batch of `n` deliveries under a clock the test moves. */
function batch(n: number, rules = RULES) {
  const clock = { nowMs: 1_000_000 };
  const holds = new BatchHolds<string>(rules, () => clock.nowMs, n);
  const after = (ms: number) => (clock.nowMs += ms);
  return { holds, clock, after };
}

describe('BatchHolds (fixed clock)', () => {
  it('asks the wait to look again only when nothing is pending or "only suspect deliveries left" flips', () => {
    const { holds } = batch(3);
    holds.started('a', false);
    holds.started('b', true);
    holds.started('c', false);
    expect(holds.nextCheckInMs()).toBe(250);
    expect(holds.needsLook()).toBe(false);
    holds.ended('a');
    holds.settled('a');
    // 'b' (suspect) and 'c' (healthy) left: nothing the hold depends on changed.
    expect(holds.needsLook()).toBe(false);
    holds.ended('c');
    holds.settled('c');
    // Only the suspect delivery is left: the hold shortens, so the wait must look.
    expect(holds.needsLook()).toBe(true);
    expect(holds.nextCheckInMs()).toBe(50);
    expect(holds.needsLook()).toBe(false);
    holds.ended('b');
    holds.settled('b');
    expect(holds.needsLook()).toBe(true);
  });

  it('counts a suspect attempt handed off no longer as holding the batch', () => {
    const { holds, after } = batch(2);
    holds.started('s', true);
    holds.waiting(true);
    expect(holds.nextCheckInMs()).toBe(50);
    after(50);
    const check = holds.check(true);
    expect(check.handOff.map(({ item }) => item)).toEqual(['s']);
    // Handed off, then it ends: the count of suspect attempts holding the batch does not go below zero.
    holds.ended('s');
    holds.settled('s');
    expect(holds.pending).toBe(1);
    holds.waiting(false);
    holds.settled('w');
    expect(holds.pending).toBe(0);
    expect(holds.needsLook()).toBe(true);
  });

  it('checks every 250 ms while healthy deliveries are pending, and gives up on first-contact waits at the check', () => {
    const { holds, after } = batch(3);
    holds.started('a', false);
    holds.waiting(true); // 'b' waits for an endpoint's first answer
    expect(holds.nextCheckInMs()).toBe(250);
    after(100);
    expect(holds.nextCheckInMs()).toBe(150);
    after(150);
    expect(holds.nextCheckInMs()).toBe(0);
    // The healthy attempt is under its 2 s hold: nothing is handed off, but the wait gives up.
    expect(holds.check(true)).toEqual({ giveUpWaiters: true, handOff: [] });
    expect(holds.pending).toBe(3);
    // The next check is one period later.
    expect(holds.nextCheckInMs()).toBe(250);
  });

  it('hands off an attempt to a suspect endpoint after 250 ms, due after its timeout and 1 s; the batch stops waiting for it', () => {
    const { holds, clock, after } = batch(2);
    holds.started('healthy', false);
    const startedMs = clock.nowMs;
    holds.started('suspect', true);
    after(249);
    expect(holds.check(true).handOff).toEqual([]);
    after(250);
    expect(holds.check(true).handOff).toEqual([{ item: 'suspect', dueAtMs: startedMs + 15_000 + 1_000 }]);
    expect(holds.isHandedOff('suspect')).toBe(true);
    expect(holds.pending).toBe(1);
    // Its attempt ends later: it was counted when handed off.
    holds.ended('suspect');
    holds.settled('suspect');
    expect(holds.pending).toBe(1);
    holds.ended('healthy');
    holds.settled('healthy');
    expect(holds.pending).toBe(0);
  });

  it('hands off any attempt after 2 s, and a healthy one not before', () => {
    const { holds, after } = batch(1);
    holds.started('slow', false);
    for (let elapsed = 250; elapsed < 2_000; elapsed += 250) {
      after(250);
      expect(holds.check(true).handOff, `after ${elapsed} ms`).toEqual([]);
    }
    after(250);
    expect(holds.check(true).handOff.map((h) => h.item)).toEqual(['slow']);
    expect(holds.pending).toBe(0);
  });

  it('waits only 50 ms once nothing but suspect deliveries is left, then hands those off at once', () => {
    const { holds, after } = batch(3);
    holds.started('healthy', false);
    holds.started('suspect', true);
    holds.waiting(true); // the third waits for a first contact
    expect(holds.nextCheckInMs()).toBe(250);
    // The healthy one settles: only suspect deliveries are left, and the hold starts over at 50 ms.
    after(30);
    holds.ended('healthy');
    holds.settled('healthy');
    holds.changed();
    expect(holds.nextCheckInMs()).toBe(50);
    after(50);
    const check = holds.check(true);
    expect(check).toEqual({ giveUpWaiters: true, handOff: [expect.objectContaining({ item: 'suspect' })] });
  });

  it('a change that leaves the situation as it was does not restart the hold', () => {
    const { holds, after } = batch(3);
    holds.started('a', false);
    holds.started('b', false);
    expect(holds.nextCheckInMs()).toBe(250);
    after(100);
    holds.ended('a');
    holds.settled('a');
    holds.changed();
    expect(holds.nextCheckInMs()).toBe(150);
  });

  it('hands off nothing, and starts the hold over, while the batch may not hand off (storage failed since it started)', () => {
    const { holds, after } = batch(2);
    holds.started('suspect', true);
    holds.started('slow', false);
    after(3_000);
    expect(holds.check(false)).toEqual({ giveUpWaiters: false, handOff: [] });
    expect(holds.pending).toBe(2);
    expect(holds.nextCheckInMs()).toBe(250);
    after(250);
    expect(
      holds
        .check(true)
        .handOff.map((h) => h.item)
        .sort(),
    ).toEqual(['slow', 'suspect']);
  });
});
