import { describe, expect, it } from 'vitest';
import type { Admission } from '../../src/delivery/endpoints/breaker.js';
import { DeferralWakeups, type DeferredRef, type WakeupEndpoint } from '../../src/delivery/endpoints/wakeups.js';

/** An endpoint stand-in whose breaker state the test sets: what admit answers, what is in flight, when it settles. */
function fakeEndpoint() {
  let settle: () => void = () => undefined;
  const state = {
    admission: { admitted: false, reason: 'slow', retryAtMs: 0 } as Admission,
    inflight: true,
    /** Ends the attempt in flight: whoever waits on settled() looks again. */
    settle: () => settle(),
  };
  const endpoint: WakeupEndpoint = {
    circuit: {
      admit: () => state.admission,
      hasInflight: () => state.inflight,
      settled: () => new Promise<void>((resolve) => (settle = resolve)),
    },
    deferred: undefined,
  };
  return { state, endpoints: { ensure: () => endpoint, get: () => endpoint } };
}

const ref = (n: number): DeferredRef => ({ webhookId: 'w', jobId: `d${n}`, deliveries: 1, parked: false });
const flush = () => new Promise((r) => setImmediate(r));

describe('DeferralWakeups', () => {
  it('promotes the deferred deliveries as soon as their endpoint takes deliveries again', async () => {
    const { state, endpoints } = fakeEndpoint();
    const promoted: DeferredRef[][] = [];
    const wakeups = new DeferralWakeups(
      endpoints,
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

  it('brings high-priority deliveries back first, in their own order, ahead of every normal one registered before', async () => {
    const { state, endpoints } = fakeEndpoint();
    const promoted: DeferredRef[][] = [];
    let room = 0;
    const wakeups = new DeferralWakeups(
      endpoints,
      async (refs) => void promoted.push([...refs]),
      () => 0,
      undefined,
      () => room,
    );
    const high = (n: number): DeferredRef => ({ ...ref(n), high: true });
    wakeups.register('e', [ref(1), ref(2)], 15_000);
    wakeups.register('e', [high(3)], 15_000);
    wakeups.register('e', [ref(4), high(5)], 15_000);
    await flush();
    // Healthy, with room for two: the two high-priority ones go first, then the normal ones in their order.
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    room = 2;
    state.settle();
    await flush();
    expect(promoted[0]).toEqual([high(3), high(5)]);
    state.inflight = true;
    state.settle();
    await flush();
    expect(promoted[1]).toEqual([ref(1), ref(2)]);
  });

  it('promotes at once when the endpoint is already healthy at registration', async () => {
    const { state, endpoints } = fakeEndpoint();
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      endpoints,
      async (refs) => void promoted.push(...refs),
      () => 0,
    );
    wakeups.register('e', [ref(1)], 15_000);
    await flush();
    expect(promoted).toEqual([ref(1)]);
  });

  it('sends an unproven endpoint one contact at a time while a suspect slot is free, and the rest once one is answered in time', async () => {
    const { state, endpoints } = fakeEndpoint();
    let free = 0;
    let freed: () => void = () => undefined;
    const promoted: DeferredRef[][] = [];
    const wakeups = new DeferralWakeups(
      endpoints,
      async (refs) => {
        promoted.push([...refs]);
        // The promoted contact starts its attempt.
        state.inflight = true;
      },
      () => 0,
      undefined,
      () => Infinity,
      { free: () => free, freed: () => new Promise<void>((resolve) => (freed = resolve)) },
    );
    // Nothing in flight, never answered: admitted only as a suspect; the suspect share is taken.
    state.admission = { admitted: true, probe: false, lane: 'suspect' };
    state.inflight = false;
    wakeups.register('e', [ref(1), ref(2), ref(3)], 40_000);
    await flush();
    expect(promoted).toEqual([]);
    // A suspect slot frees: one contact goes.
    free = 1;
    freed();
    await flush();
    await flush();
    expect(promoted).toEqual([[ref(1)]]);
    expect(wakeups.pending('e')).toBe(2);
    // It times out: still unproven, nothing in flight; the next contact goes.
    state.inflight = false;
    state.settle();
    await flush();
    await flush();
    expect(promoted).toEqual([[ref(1)], [ref(2)]]);
    // That one is answered in time: the endpoint is healthy, the rest follow at once.
    state.inflight = false;
    state.admission = { admitted: true, probe: false, lane: 'healthy' };
    state.settle();
    await flush();
    await flush();
    expect(promoted).toEqual([[ref(1)], [ref(2)], [ref(3)]]);
    expect(wakeups.pending('e')).toBe(0);
  });

  it('behind an open circuit, promotes one delivery as the probe when the open period ends', async () => {
    const { state, endpoints } = fakeEndpoint();
    let nowMs = 0;
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      endpoints,
      async (refs) => {
        promoted.push(...refs);
        state.inflight = true;
      },
      () => nowMs,
    );
    state.inflight = false;
    state.admission = { admitted: false, reason: 'open', retryAtMs: 30 };
    wakeups.register('e', [ref(1), ref(2)], 60_000);
    await flush();
    expect(promoted).toEqual([]);
    nowMs = 30;
    state.admission = { admitted: true, probe: true, lane: 'suspect' };
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(promoted).toEqual([ref(1)]);
    expect(wakeups.pending('e')).toBe(1);
  });

  it('forgets deliveries whose own delay has passed', async () => {
    const { state, endpoints } = fakeEndpoint();
    let nowMs = 0;
    const promoted: DeferredRef[] = [];
    const wakeups = new DeferralWakeups(
      endpoints,
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
