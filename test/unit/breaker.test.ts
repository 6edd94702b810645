import { describe, expect, it } from 'vitest';
import { EndpointBreakers, type BreakerOptions } from '../../src/delivery/breaker.js';
import { SendSlots } from '../../src/delivery/send-slots.js';

const OPTIONS: BreakerOptions = { failureThreshold: 3, timeoutThreshold: 2, openMs: 1_000, openMsMax: 4_000, slowAfterMs: 100, slowInflightMax: 1, attemptTimeoutMs: 500 };
const E = 'http://receiver.example:8080';

describe('EndpointBreakers', () => {
  it('gives an endpoint that never answered one attempt in flight; the rest wait for its answer', async () => {
    const b = new EndpointBreakers(OPTIONS);
    const first = b.admit(E, 0);
    expect(first).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    const ticket = b.start(E, 0);
    const second = b.admit(E, 1);
    expect(second.admitted).toBe(false);
    if (second.admitted || second.reason !== 'first_contact') throw new Error('expected first_contact');
    let settled = false;
    void second.settled.then(() => (settled = true));
    await Promise.resolve();
    expect(settled).toBe(false);
    b.finish(E, ticket, 'healthy', 5);
    await second.settled;
    expect(settled).toBe(true);
    // Answered in time: healthy lane, any number in flight, and it stays known.
    for (let i = 0; i < 20; i++) {
      expect(b.admit(E, 10)).toEqual({ admitted: true, probe: false, lane: 'healthy' });
      b.start(E, 10);
    }
  });

  it('keeps a slow endpoint to one attempt in flight, then lets it recover', () => {
    const b = new EndpointBreakers(OPTIONS);
    b.finish(E, b.start(E, 0), 'healthy', 1);
    const slow = b.start(E, 10);
    b.start(E, 10);
    // Two in flight, one of them past slowAfterMs: suspect, no more.
    expect(b.admit(E, 200)).toMatchObject({ admitted: false, reason: 'slow', retryAtMs: 610 });
    b.finish(E, slow, 'healthy', 250);
    // The slow answer leaves it suspect for openMs: one in flight at most (one still is).
    expect(b.admit(E, 260)).toMatchObject({ admitted: false, reason: 'slow' });
  });

  it('opens the circuit after timeoutThreshold timeouts in a row, and a successful probe closes it', () => {
    const changes: string[] = [];
    const b = new EndpointBreakers(OPTIONS, (_e, state) => changes.push(state));
    // It answered once, so the first timeout only makes it suspect.
    b.finish(E, b.start(E, 0), 'healthy', 1);
    b.finish(E, b.start(E, 0), 'timeout', 100);
    expect(b.openEndpoints(100)).toEqual([]);
    expect(b.admit(E, 100)).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    b.finish(E, b.start(E, 100), 'timeout', 200);
    expect(b.openEndpoints(200)).toEqual([E]);
    expect(b.admit(E, 500)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 1_200 });
    const probe = b.admit(E, 1_300);
    expect(probe).toEqual({ admitted: true, probe: true, lane: 'suspect' });
    const ticket = b.start(E, 1_300, true);
    expect(b.admit(E, 1_301)).toMatchObject({ admitted: false, reason: 'probing' });
    b.finish(E, ticket, 'healthy', 1_310);
    expect(b.openEndpoints(1_310)).toEqual([]);
    expect(changes).toEqual(['open', 'half_open', 'closed']);
    expect(b.admit(E, 1_320)).toEqual({ admitted: true, probe: false, lane: 'healthy' });
  });

  it('opens at once when an endpoint that never answered times out on its first contact', () => {
    const b = new EndpointBreakers(OPTIONS);
    b.finish(E, b.start(E, 0), 'timeout', 500);
    expect(b.openEndpoints(500)).toEqual([E]);
    expect(b.admit(E, 600)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 1_500 });
  });

  it('opens after failureThreshold failures and doubles the open period on a failed probe', () => {
    const b = new EndpointBreakers(OPTIONS);
    for (let i = 0; i < 3; i++) b.finish(E, b.start(E, i), 'failed', i + 1);
    expect(b.openEndpoints(3)).toEqual([E]);
    b.finish(E, b.start(E, 1_100, true), 'failed', 1_110);
    expect(b.admit(E, 2_000)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 3_110 });
  });
});

describe('SendSlots', () => {
  it('hands out slots first come, first served and caps the suspect share without queueing it', async () => {
    const slots = new SendSlots(2, 1);
    await slots.acquire();
    expect(slots.markSuspect()).toBe(true);
    await slots.acquire();
    expect(slots.markSuspect()).toBe(false);
    const order: number[] = [];
    const third = slots.acquire().then(() => order.push(3));
    const fourth = slots.acquire().then(() => order.push(4));
    expect(slots.inFlight).toBe(2);
    slots.release(true);
    await third;
    expect(order).toEqual([3]);
    // The suspect share is free again.
    expect(slots.markSuspect()).toBe(true);
    slots.release();
    await fourth;
    expect(order).toEqual([3, 4]);
    let idle = false;
    const idlePromise = slots.idle().then(() => (idle = true));
    slots.release(true);
    await Promise.resolve();
    expect(idle).toBe(false);
    slots.release();
    await idlePromise;
    expect(idle).toBe(true);
  });

  it('refuses sizes that cannot work', () => {
    expect(() => new SendSlots(0, 1)).toThrow(RangeError);
    expect(() => new SendSlots(4, 5)).toThrow(RangeError);
  });
});
