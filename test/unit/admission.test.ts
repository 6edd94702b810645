import { afterEach, describe, expect, it } from 'vitest';
import {
  EndpointAdmission,
  GIVE_UP_NOW,
  Lease,
  type AdmitOptions,
  type Admitted,
  type GiveUp,
} from '../../src/delivery/endpoints/admission.js';
import { DEFAULT_BREAKER_OPTIONS } from '../../src/delivery/endpoints/breaker.js';
import { EndpointFlow } from '../../src/delivery/endpoints/flow.js';
import { EndpointRegistry, type Endpoint } from '../../src/delivery/endpoints/registry.js';
import { SendSlots } from '../../src/delivery/endpoints/send-slots.js';
import { StorageGate } from '../../src/delivery/storage-gate.js';
import type { SendRateLimiter } from '../../src/store/send-rate.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const NOW = 1_764_000_000_000;
const OPTIONS = {
  ...DEFAULT_BREAKER_OPTIONS,
  failureThreshold: 2,
  openMs: 30_000,
  slowAfterMs: 2_000,
  attemptTimeoutMs: 5_000,
};
const RULES = { circuitHoldMs: 30_000, unprovenHoldMs: 40_000 };
const OK = { health: 'healthy', flow: 'ok', retryAfterMs: undefined, answered: true } as const;

const webhook = webhookFixture;

/** A batch's options (no spread, no wait for room, woken by the wakeups), with `over`. */
const batch = (over: Partial<AdmitOptions> = {}): AdmitOptions => ({
  dueAtMs: NOW,
  epoch: 0,
  giveUp: { given: false, when: new Promise<void>(() => undefined) },
  deferJitterMs: 0,
  roomWaitMs: 0,
  ...over,
});
/** A single job's. */
const single = (over: Partial<AdmitOptions> = {}): AdmitOptions =>
  batch({ giveUp: GIVE_UP_NOW, deferJitterMs: 1_000, roomWaitMs: 250, ...over });

const gates: StorageGate[] = [];
afterEach(() => gates.splice(0).forEach((gate) => gate.stop()));

/** An admission over real endpoints, slots and a gate, on a clock the test moves; random is 0.5. */
function world(
  options: {
    slots?: number;
    suspectMax?: number;
    sendRate?: SendRateLimiter;
    answeredElsewhere?: boolean;
    /** The first open period, and the circuit hold with it (as the engine sets them). */
    openMs?: number;
  } = {},
) {
  const clock = { nowMs: NOW };
  const nowMs = () => clock.nowMs;
  const openMs = options.openMs ?? OPTIONS.openMs;
  const endpoints = new EndpointRegistry({ options: { ...OPTIONS, openMs }, onStateChange: () => undefined }, nowMs);
  const flow = new EndpointFlow(endpoints, undefined, 'w', nowMs);
  const slots = new SendSlots(options.slots ?? 10, options.suspectMax ?? 2);
  const gate = new StorageGate(async () => false, undefined, 60_000);
  gates.push(gate);
  const admission = new EndpointAdmission({
    endpoints,
    flow,
    slots,
    gate,
    sendRate: options.sendRate ?? { take: () => Promise.reject(new Error('no limit was set')) },
    ...(options.answeredElsewhere === undefined
      ? {}
      : {
          endpointMemory: {
            answeredLately: async () => options.answeredElsewhere!,
            rememberAnswered: async () => undefined,
          },
        }),
    suspectHoldMs: 250,
    rules: { ...RULES, circuitHoldMs: options.openMs ?? RULES.circuitHoldMs },
    nowMs,
    random: () => 0.5,
  });
  const hook = webhook();
  const endpoint: Endpoint = endpoints.ofWebhook(hook);
  /** Admits and ends one attempt answered `health`, so the endpoint is known. */
  const answered = (health: 'healthy' | 'failed' = 'healthy') => {
    const lease = admission.admit(hook, batch()) as Lease;
    lease.settle({ ...OK, health }, clock.nowMs);
    lease.end();
  };
  return { clock, endpoints, flow, slots, gate, admission, hook, endpoint, answered };
}

const lease = (admitted: Admitted | Promise<Admitted>): Lease => {
  if (!(admitted instanceof Lease)) throw new Error(`expected a lease, got ${JSON.stringify(admitted)}`);
  return admitted;
};

describe('EndpointAdmission (fixed clock)', () => {
  it('admits a known healthy endpoint synchronously, with one lease holding slot, limit and breaker ticket', () => {
    const w = world();
    w.answered();
    const admitted = lease(w.admission.admit(w.hook, batch()));
    expect(admitted.slot).toBe('healthy');
    expect(w.slots.inFlight).toBe(1);
    expect(w.endpoint.limit.view(NOW).inflight).toBe(1);
    expect(w.endpoint.circuit.hasInflight()).toBe(true);
    admitted.settle(OK, NOW + 5);
    // The answer reaches the endpoint at once; the slot is held until the lease ends.
    expect(w.endpoint.circuit.hasInflight()).toBe(false);
    expect(w.endpoint.limit.view(NOW).inflight).toBe(0);
    expect(w.slots.inFlight).toBe(1);
    admitted.end();
    expect(w.slots.inFlight).toBe(0);
  });

  it('ends a lease once: a second end gives nothing back twice, a second answer is a bug', () => {
    const w = world();
    w.answered();
    const first = lease(w.admission.admit(w.hook, batch()));
    const second = lease(w.admission.admit(w.hook, batch()));
    first.settle(OK, NOW);
    expect(() => first.settle(OK, NOW)).toThrow(/settled once/);
    first.end();
    first.end();
    expect(w.slots.inFlight).toBe(1);
    expect(() => first.settle(OK, NOW)).toThrow(/settled once/);
    second.end();
    expect(w.slots.inFlight).toBe(0);
  });

  it('takes back a lease ended unanswered as if never started: a first contact stays one, nothing counted', () => {
    const w = world();
    const contact = lease(w.admission.admit(w.hook, batch()));
    expect(contact.slot).toBe('suspect');
    contact.end();
    expect(w.slots.inFlight).toBe(0);
    expect(w.slots.suspectFree()).toBe(2);
    expect(w.endpoint.circuit.answered).toBe(false);
    expect(w.endpoint.circuit.hasInflight()).toBe(false);
    expect(lease(w.admission.admit(w.hook, batch())).slot).toBe('suspect');
  });

  it('learns once that other workers saw the endpoint answer: no first contact, and the next admission is synchronous', async () => {
    const w = world({ answeredElsewhere: true });
    const pending = w.admission.admit(w.hook, batch());
    expect(pending).toBeInstanceOf(Promise);
    expect(lease(await pending).slot).toBe('healthy');
    expect(w.admission.admit(w.hook, batch())).toBeInstanceOf(Lease);
  });

  it('lets a batch wait in the process for a first contact’s answer, and start once it comes', async () => {
    const w = world();
    const contact = lease(w.admission.admit(w.hook, batch()));
    const waiting: boolean[] = [];
    const admitted = w.admission.admit(w.hook, batch({ onWaiting: (on) => waiting.push(on) }));
    expect(admitted).toBeInstanceOf(Promise);
    expect(waiting).toEqual([true]);
    contact.settle(OK, NOW + 10);
    contact.end();
    expect(lease(await admitted).slot).toBe('healthy');
    expect(waiting).toEqual([true, false]);
  });

  it('defers behind a first contact: a single job at once, a batch once it gave up or the contact is past the suspect hold', async () => {
    const w = world();
    lease(w.admission.admit(w.hook, batch()));
    const held = { kind: 'deferred', wakeOn: w.endpoint.key, retryAtMs: NOW + 40_500, reason: 'slow' };
    expect(w.admission.admit(w.hook, single())).toEqual(held);
    const given: GiveUp = { given: true, when: Promise.resolve() };
    expect(w.admission.admit(w.hook, batch({ giveUp: given }))).toEqual({ ...held, retryAtMs: NOW + 40_000 });
    w.clock.nowMs = NOW + 250;
    expect(w.admission.admit(w.hook, batch())).toEqual({ ...held, retryAtMs: NOW + 40_250 });
    // A batch that gives up while waiting is deferred then.
    w.clock.nowMs = NOW + 100;
    let giveUp!: () => void;
    const round = { given: false, when: new Promise<void>((resolve) => (giveUp = resolve)) };
    const waiting = w.admission.admit(w.hook, batch({ giveUp: round }));
    round.given = true;
    giveUp();
    expect(await waiting).toEqual({ ...held, retryAtMs: NOW + 40_100 });
  });

  it('defers behind an open circuit to its end, records circuit_open past one open period, and probes at once for a replay', () => {
    const w = world();
    w.answered('failed');
    w.answered('failed');
    expect(w.admission.admit(w.hook, batch())).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 30_000,
      reason: 'open',
    });
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 1 }))).toEqual({ kind: 'circuit_open' });
    const probe = lease(w.admission.admit(w.hook, batch({ forceProbe: true })));
    expect(w.admission.admit(w.hook, batch({ forceProbe: true }))).toMatchObject({
      kind: 'deferred',
      reason: 'probing',
    });
    probe.settle(OK, NOW + 1);
    probe.end();
    expect(w.endpoints.openEndpoints(NOW + 1)).toEqual([]);
  });

  it('sends a last attempt past the circuit’s hold as its probe, or after the probe in flight; never records it unsent', () => {
    const w = world();
    w.answered('failed');
    w.answered('failed');
    // Within the hold, a last attempt waits for the open period's end like any other.
    expect(w.admission.admit(w.hook, batch({ lastAttempt: true }))).toMatchObject({ kind: 'deferred', reason: 'open' });
    // Past it: an earlier attempt is recorded circuit_open; the last one is sent as the probe.
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 1 }))).toEqual({ kind: 'circuit_open' });
    const probe = lease(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 1, lastAttempt: true })));
    expect(probe.slot).toBe('suspect');
    // Another last attempt past the hold while it is in flight is deferred until that probe has its
    // answer (woken then), holding nothing meanwhile; the probe failed, it is the next probe at once.
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 30_000, lastAttempt: true }))).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 4_000,
      reason: 'probing',
    });
    expect(w.slots.inFlight).toBe(1);
    probe.settle({ ...OK, health: 'failed' }, NOW + 1);
    probe.end();
    expect(w.endpoint.circuit.isOpen(NOW + 2)).toBe(true);
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 1 }))).toEqual({ kind: 'circuit_open' });
    const secondProbe = lease(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 30_000, lastAttempt: true })));
    // Answered: the circuit closes, whichever of the origin's webhooks and paths it came from.
    secondProbe.settle(OK, NOW + 2);
    secondProbe.end();
    expect(w.endpoints.openEndpoints(NOW + 2)).toEqual([]);
    expect(lease(w.admission.admit(w.hook, batch())).slot).toBe('healthy');
  });

  it('defers a last attempt behind a probe in flight to its answer even past the hold (an open period grown past it)', () => {
    // A 1 s open period (and hold), doubled by a failed probe: the next probe in flight is looked
    // at again 2 s on, past the hold.
    const w = world({ openMs: 1_000 });
    w.answered('failed');
    w.answered('failed');
    const failed = lease(w.admission.admit(w.hook, batch({ forceProbe: true })));
    failed.settle({ ...OK, health: 'failed' }, NOW);
    failed.end();
    const probe = lease(w.admission.admit(w.hook, batch({ forceProbe: true })));
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 5_000 }))).toEqual({ kind: 'circuit_open' });
    expect(w.admission.admit(w.hook, batch({ dueAtMs: NOW - 5_000, lastAttempt: true }))).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 2_000,
      reason: 'probing',
    });
    probe.end();
  });

  it('defers behind a slow endpoint', () => {
    const w = world();
    w.answered();
    const slow = lease(w.admission.admit(w.hook, batch()));
    w.clock.nowMs = NOW + 2_000;
    expect(w.admission.admit(w.hook, batch())).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 42_000,
      reason: 'slow',
    });
    slow.end();
  });

  it('defers to the end of a Retry-After pause, with nothing to wake it', () => {
    const w = world();
    w.answered();
    const asked = lease(w.admission.admit(w.hook, batch()));
    asked.settle({ health: 'healthy', flow: 'congested', retryAfterMs: 3_000, answered: true }, NOW);
    asked.end();
    expect(w.admission.admit(w.hook, single())).toEqual({
      kind: 'deferred',
      wakeOn: undefined,
      retryAtMs: NOW + 3_500,
      reason: 'paused',
    });
  });

  it('at a concurrency limit: a batch defers at once, a single job waits for room for a while', async () => {
    const w = world();
    w.answered();
    const limited = webhook({ maxConcurrency: 1 });
    const holder = lease(w.admission.admit(limited, batch()));
    expect(w.admission.admit(limited, batch())).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 1_500,
      reason: 'concurrency',
    });
    const waiting = w.admission.admit(limited, single());
    expect(waiting).toBeInstanceOf(Promise);
    holder.settle(OK, NOW);
    holder.end();
    lease(await waiting).end();
    // Nobody makes room: it defers when its wait is over.
    const blocker = lease(w.admission.admit(limited, batch()));
    const gone = w.admission.admit(limited, single({ roomWaitMs: 5 }));
    w.clock.nowMs = NOW + 5;
    expect(await gone).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 5 + 1_500,
      reason: 'concurrency',
    });
    blocker.end();
  });

  it('waits for the worker’s own slots rather than deferring, however long, and starts when one frees', async () => {
    const w = world({ slots: 2 });
    w.answered();
    const held = [lease(w.admission.admit(w.hook, batch())), lease(w.admission.admit(w.hook, batch()))];
    const waiting = w.admission.admit(w.hook, batch());
    expect(waiting).toBeInstanceOf(Promise);
    held[0]!.settle(OK, NOW);
    held[0]!.end();
    expect(lease(await waiting).slot).toBe('healthy');
  });

  it('defers a suspect attempt whose share of the slots is taken', () => {
    const w = world({ suspectMax: 1 });
    const other = webhook({ id: 'wh-2', callbackUrl: 'https://other.example' });
    lease(w.admission.admit(other, batch()));
    expect(w.admission.admit(w.hook, batch())).toEqual({
      kind: 'deferred',
      wakeOn: w.endpoint.key,
      retryAtMs: NOW + 40_500,
      reason: 'slow',
    });
    expect(w.slots.inFlight).toBe(1);
  });

  it('takes a rate-limited webhook’s token last, and on refusal gives everything back and takes its place in line', async () => {
    const taken: string[] = [];
    const w = world({ sendRate: { take: async (id) => (taken.push(id), { sent: false, retryInMs: 700 }) } });
    w.answered();
    const limited = webhook({ rateLimitPerSecond: 5 });
    expect(await w.admission.admit(limited, batch())).toEqual({
      kind: 'deferred',
      wakeOn: undefined,
      retryAtMs: NOW + 700,
      reason: 'rate_limited',
    });
    expect(taken).toEqual(['wh-1']);
    expect(w.slots.inFlight).toBe(0);
    expect(w.endpoint.limit.view(NOW).inflight).toBe(0);
    expect(w.endpoint.circuit.hasInflight()).toBe(false);
  });

  it('sends nothing while storage fails: a failing token read closes the gate, and a closed gate or a later epoch refuses', async () => {
    const w = world({ sendRate: { take: () => Promise.reject(new Error('connection lost')) } });
    w.answered();
    expect(await w.admission.admit(webhook({ rateLimitPerSecond: 5 }), batch())).toEqual({ kind: 'storage' });
    expect(w.gate.open).toBe(false);
    expect(w.slots.inFlight).toBe(0);
    expect(w.admission.admit(w.hook, batch())).toEqual({ kind: 'storage' });
    expect(w.admission.admit(w.hook, batch({ epoch: 1 }))).toEqual({ kind: 'storage' });
  });

  it('gives the place under the limit back when storage fails while a slot is waited for', async () => {
    const w = world({ slots: 1, suspectMax: 1 });
    w.answered();
    // Another endpoint holds the only slot.
    const holder = lease(w.admission.admit(webhook({ id: 'wh-2', callbackUrl: 'https://other.example' }), batch()));
    const waiting = w.admission.admit(w.hook, batch());
    expect(w.endpoint.limit.view(NOW).inflight).toBe(1);
    w.gate.close();
    holder.end();
    expect(await waiting).toEqual({ kind: 'storage' });
    expect(w.slots.inFlight).toBe(0);
    expect(w.endpoint.limit.view(NOW).inflight).toBe(0);
  });
});
