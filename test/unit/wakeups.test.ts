import { describe, expect, it } from 'vitest';
import type { Admission } from '../../src/delivery/breaker.js';
import { DeferralWakeups, type DeferredRef } from '../../src/delivery/wakeups.js';

/** A breaker stand-in whose state the test sets: what admit answers, what is in flight, when it settles. */
function fakeBreakers() {
  let settle: () => void = () => undefined;
  const state = {
    admission: { admitted: false, reason: 'slow', retryAtMs: 0 } as Admission,
    inflight: true,
    /** Ends the attempt in flight: whoever waits on settled() looks again. */
    settle: () => settle(),
  };
  return {
    state,
    breakers: {
      admit: () => state.admission,
      hasInflight: () => state.inflight,
      settled: () => new Promise<void>((resolve) => (settle = resolve)),
    },
  };
}

const ref = (n: number): DeferredRef => ({ webhookId: 'w', deliveryId: `d${n}` });
const flush = () => new Promise((r) => setImmediate(r));

describe('DeferralWakeups', () => {
  it('promotes the deferred deliveries as soon as their endpoint takes deliveries again', async () => {
    const { state, breakers } = fakeBreakers();
    const promoted: DeferredRef[][] = [];
    const wakeups = new DeferralWakeups(
      breakers,
      async (refs) => void promoted.push([...refs]),
      () => 0,
    );
    wakeups.register('e', [ref(1), ref(2)], 15_000);
    wakeups.register('e', [ref(3)], 15_000);
    await flush();
    expect(promoted).toEqual([]);
    expect(wakeups.pending('e')).toBe(3);

    // The first contact is answered in time: the endpoint is healthy now.
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    state.settle();
    await flush();
    expect(promoted).toEqual([[ref(1), ref(2), ref(3)]]);
    expect(wakeups.pending('e')).toBe(0);
  });

  it('promotes at once when the endpoint is already healthy at registration', async () => {
    const { state, breakers } = fakeBreakers();
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      breakers,
      async (refs) => void promoted.push(...refs),
      () => 0,
    );
    wakeups.register('e', [ref(1)], 15_000);
    await flush();
    expect(promoted).toEqual([ref(1)]);
  });

  it('leaves deliveries to their own delay when nothing in flight can change the endpoint, or a suspect lane is all it offers', async () => {
    const { state, breakers } = fakeBreakers();
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      breakers,
      async (refs) => void promoted.push(...refs),
      () => 0,
    );
    // Admitted, but only as a suspect: a wake-up would only defer them again.
    state.admission = { admitted: true, probe: true, lane: 'suspect' };
    state.inflight = false;
    wakeups.register('e', [ref(1)], 15_000);
    await flush();
    expect(promoted).toEqual([]);
    expect(wakeups.pending('e')).toBe(0);
  });

  it('forgets deliveries whose own delay has passed', async () => {
    const { state, breakers } = fakeBreakers();
    let nowMs = 0;
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      breakers,
      async (refs) => void promoted.push(...refs),
      () => nowMs,
    );
    wakeups.register('e', [ref(1)], 1_000);
    nowMs = 2_000;
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    state.settle();
    await flush();
    expect(promoted).toEqual([]);
  });
});
