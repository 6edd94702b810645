import { describe, expect, it } from 'vitest';
import {
  Circuit,
  DEFAULT_BREAKER_OPTIONS,
  type BreakerOptions,
  type CircuitChange,
} from '../../src/delivery/endpoints/breaker.js';
import { SendSlots } from '../../src/delivery/endpoints/send-slots.js';
import { lcg } from '../helpers/random.js';

const OPTIONS: BreakerOptions = {
  failureThreshold: 3,
  timeoutThreshold: 2,
  failureRate: 0.75,
  minAttempts: 20,
  windowMs: 1_000,
  openMs: 1_000,
  openMsMax: 4_000,
  slowAfterMs: 100,
  slowInflightMax: 1,
  attemptTimeoutMs: 500,
};
const E = 'http://receiver.example:8080';

/** One endpoint's circuit, `E`'s. */
const circuit = (
  options: BreakerOptions,
  onStateChange: (endpoint: string, change: CircuitChange) => void = () => undefined,
) => new Circuit(E, { options, onStateChange });
/** The open circuits among `E`'s: `[E]` or none. */
const open = (b: Circuit, nowMs: number) => (b.isOpen(nowMs) ? [E] : []);

describe('Circuit (one endpoint’s breaker)', () => {
  it('gives an endpoint that never answered one attempt in flight; the rest wait for its answer', async () => {
    const b = circuit(OPTIONS);
    const first = b.admit(0);
    expect(first).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    const ticket = b.start(0);
    const second = b.admit(1);
    expect(second.admitted).toBe(false);
    if (second.admitted || second.reason !== 'first_contact') throw new Error('expected first_contact');
    let settled = false;
    void second.settled.then(() => (settled = true));
    await Promise.resolve();
    expect(settled).toBe(false);
    b.finish(ticket, 'healthy', 5);
    await second.settled;
    expect(settled).toBe(true);
    // Answered in time: healthy lane, any number in flight, and it stays known.
    for (let i = 0; i < 20; i++) {
      expect(b.admit(10)).toEqual({ admitted: true, probe: false, lane: 'healthy' });
      b.start(10);
    }
  });

  it('takes back a started attempt that was not sent: it counts for nothing and wakes the waiters', async () => {
    const b = circuit(OPTIONS);
    const ticket = b.start(0);
    const waiting = b.admit(1);
    if (waiting.admitted || waiting.reason !== 'first_contact') throw new Error('expected first_contact');
    b.cancel(ticket);
    await waiting.settled;
    // Still a first contact, with nothing in flight: the next one may go; nothing was counted.
    expect(b.hasInflight()).toBe(false);
    expect(b.answered).toBe(false);
    expect(b.admit(2)).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    // A probe taken back leaves the circuit open with its period over: the next delivery probes.
    const down = circuit(OPTIONS);
    for (let i = 0; i < 3; i += 1) down.finish(down.start(0), 'failed', 10);
    expect(open(down, 10)).toEqual([E]);
    const probe = down.start(1_010, true);
    expect(down.admit(1_011).admitted).toBe(false);
    down.cancel(probe);
    expect(down.admit(1_012)).toEqual({ admitted: true, probe: true, lane: 'suspect' });
  });

  it('keeps a slow endpoint to one attempt in flight, then lets it recover', () => {
    const b = circuit(OPTIONS);
    b.finish(b.start(0), 'healthy', 1);
    const slow = b.start(10);
    b.start(10);
    // Two in flight, one of them past slowAfterMs: suspect, no more.
    expect(b.admit(200)).toMatchObject({ admitted: false, reason: 'slow', retryAtMs: 610 });
    b.finish(slow, 'healthy', 250);
    // The slow answer leaves it suspect for openMs: one in flight at most (one still is).
    expect(b.admit(260)).toMatchObject({ admitted: false, reason: 'slow' });
  });

  it('opens the circuit after timeoutThreshold timeouts in a row with no healthy answer lately, and a successful probe closes it', () => {
    const changes: string[] = [];
    const b = circuit(OPTIONS, (_e, change) => changes.push(change.state));
    // It answered once, so the first timeout only makes it suspect.
    b.finish(b.start(0), 'healthy', 1);
    b.finish(b.start(1_500), 'timeout', 2_000);
    expect(open(b, 2_000)).toEqual([]);
    expect(b.admit(2_000)).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    b.finish(b.start(2_000), 'timeout', 2_500);
    expect(open(b, 2_500)).toEqual([E]);
    expect(b.admit(2_600)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 3_500 });
    const probe = b.admit(3_600);
    expect(probe).toEqual({ admitted: true, probe: true, lane: 'suspect' });
    const ticket = b.start(3_600, true);
    expect(b.admit(3_601)).toMatchObject({ admitted: false, reason: 'probing' });
    b.finish(ticket, 'healthy', 3_610);
    expect(open(b, 3_610)).toEqual([]);
    expect(changes).toEqual(['open', 'half_open', 'closed']);
    expect(b.admit(3_620)).toEqual({ admitted: true, probe: false, lane: 'healthy' });
  });

  it('gives an endpoint that never answered a second first contact after a timeout, and opens on the second', () => {
    const b = circuit(OPTIONS);
    b.finish(b.start(0), 'timeout', 500);
    expect(open(b, 500)).toEqual([]);
    // Still a first contact: one attempt in flight, the rest wait for it.
    expect(b.admit(500)).toEqual({ admitted: true, probe: false, lane: 'suspect' });
    const second = b.start(500);
    expect(b.admit(501)).toMatchObject({ admitted: false, reason: 'first_contact' });
    b.finish(second, 'timeout', 1_000);
    expect(open(b, 1_000)).toEqual([E]);
    expect(b.admit(1_100)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 2_000 });
  });

  it('opens a down endpoint after failureThreshold failures and doubles the open period on a failed probe', () => {
    const reasons: string[] = [];
    const b = circuit(OPTIONS, (_e, change) => change.state === 'open' && reasons.push(change.reason));
    for (let i = 0; i < 2; i++) b.finish(b.start(i), 'failed', i + 1);
    expect(open(b, 3)).toEqual([]);
    b.finish(b.start(2), 'failed', 3);
    expect(open(b, 3)).toEqual([E]);
    b.finish(b.start(1_100, true), 'failed', 1_110);
    expect(b.admit(2_000)).toMatchObject({ admitted: false, reason: 'open', retryAtMs: 3_110 });
    expect(reasons).toEqual(['consecutive_failures', 'probe_failed']);
  });

  it('counts "in a row" by start order: two hung requests of a burst whose later requests were answered do not open it', () => {
    // A window shorter than the timeout, so only the start-order rule stands between the burst and an open circuit.
    const b = circuit({ ...OPTIONS, windowMs: 100, minAttempts: 1_000 });
    b.finish(b.start(0), 'healthy', 1);
    const tickets = Array.from({ length: 20 }, () => b.start(1_000));
    tickets.forEach((ticket, i) => {
      if (i !== 3 && i !== 7) b.finish(ticket, 'healthy', 1_005);
    });
    // The two hangs end one timeout after they started, back to back, after every fast answer.
    b.finish(tickets[3]!, 'timeout', 1_500);
    b.finish(tickets[7]!, 'timeout', 1_500);
    expect(open(b, 1_500)).toEqual([]);
    // Two timeouts that started after the last answered attempt are a hanging endpoint.
    b.finish(b.start(1_600), 'timeout', 2_100);
    b.finish(b.start(2_100), 'timeout', 2_600);
    expect(open(b, 2_600)).toEqual([E]);
  });

  it('never cuts off a mostly healthy endpoint: 25 % failures and 2 % hangs in bursts of 20 over 3,000 attempts', () => {
    const defaults = { ...DEFAULT_BREAKER_OPTIONS, attemptTimeoutMs: 15_000 };
    const changes: string[] = [];
    const b = circuit(defaults, (_e, change) => changes.push(change.state));
    const random = lcg(42);
    let nowMs = 0;
    const hung: { ticket: number; endsMs: number }[] = [];
    for (let burst = 0; burst < 150; burst++) {
      nowMs += 400;
      for (const h of hung.filter((x) => x.endsMs <= nowMs)) b.finish(h.ticket, 'timeout', h.endsMs);
      hung.splice(0, hung.length, ...hung.filter((x) => x.endsMs > nowMs));
      const started = Array.from({ length: 20 }, () => b.start(nowMs));
      for (const ticket of started) {
        const roll = random();
        if (roll < 0.02) hung.push({ ticket, endsMs: nowMs + 15_000 });
        else b.finish(ticket, roll < 0.27 ? 'failed' : 'healthy', nowMs + 5);
      }
    }
    expect(changes).toEqual([]);
  });

  it('opens a degraded endpoint on its failure rate, even while some requests are answered', () => {
    const reasons: string[] = [];
    const b = circuit(
      { ...OPTIONS, windowMs: 10_000, minAttempts: 20, failureRate: 0.75 },
      (_e, change) => change.state === 'open' && reasons.push(change.reason),
    );
    // Two failures, then a success: never three in a row, and two thirds fail: below the rate.
    for (let i = 0; i < 30; i++) b.finish(b.start(i * 10), i % 3 === 2 ? 'healthy' : 'failed', i * 10 + 5);
    expect(reasons).toEqual([]);
    // Later (the window has moved on), four failures to every success: four in five fail.
    for (let i = 0; i < 30 && reasons.length === 0; i++)
      b.finish(b.start(20_000 + i * 10), i % 5 === 0 ? 'healthy' : 'failed', 20_000 + i * 10 + 5);
    expect(reasons).toEqual(['failure_rate']);
    expect(open(b, 20_300)).toEqual([E]);
  });

  it('lets a replay or test event probe an open circuit at once, and names the webhooks in its changes', () => {
    const changes: unknown[] = [];
    const b = circuit(OPTIONS, (_e, change) => changes.push(change));
    for (let i = 0; i < 3; i++) b.finish(b.start(i, false, 'wh-1'), 'failed', i + 1);
    expect(b.admit(10)).toMatchObject({ admitted: false, reason: 'open' });
    expect(b.admit(10, true)).toEqual({ admitted: true, probe: true, lane: 'suspect' });
    const ticket = b.start(10, true, 'wh-2');
    // One probe at a time, forced or not.
    expect(b.admit(11, true)).toMatchObject({ admitted: false, reason: 'probing' });
    b.finish(ticket, 'healthy', 20);
    expect(changes).toEqual([
      { state: 'open', reason: 'consecutive_failures', openForMs: 1_000, webhookIds: ['wh-1'] },
      { state: 'half_open', webhookIds: ['wh-1', 'wh-2'] },
      { state: 'closed', webhookIds: ['wh-1', 'wh-2'] },
    ]);
  });

  it('treats an endpoint another worker saw answer as known: no first-contact wait', () => {
    const b = circuit(OPTIONS);
    b.markAnswered();
    expect(b.answered).toBe(true);
    b.start(0);
    expect(b.admit(1)).toEqual({ admitted: true, probe: false, lane: 'healthy' });
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
