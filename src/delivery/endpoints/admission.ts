import type { Webhook } from '../../domain/webhook.js';
import type { EndpointMemory } from '../../store/endpoints.js';
import type { SendRateLimiter } from '../../store/send-rate.js';
import type { Interpretation } from '../interpret.js';
import type { StorageGate } from '../storage-gate.js';
import { planDeferral, type DeferralRules, type HoldBack, type NotAdmitted } from './deferral.js';
import type { EndpointFlow } from './flow.js';
import type { Endpoint, EndpointRegistry } from './registry.js';
import type { SendSlots } from './send-slots.js';

/**
 * Admission: whether a delivery's attempt may start now. `admit()` answers either why not (a
 * deferral, `circuit_open`, or storage failing) or with one Lease holding everything the attempt
 * took: its place under the endpoint's concurrency limit, a send slot (in the suspect lane for an
 * endpoint that has not proven itself), the breaker's ticket (a probe or a first contact among
 * them), and, for a rate-limited webhook, the send window's token (spent, never given back). The
 * lease gives all of it back in one place (Lease.end), so no path of a delivery releases anything
 * by hand (Netflix concurrency-limits' Limiter and Listener have this shape).
 *
 * The steps, in order (each may hold the delivery back; see deferral.ts for where it then goes):
 * 1. What other workers know of the endpoint, once per endpoint and process: whether it answered
 *    lately (so its first attempt here is no first contact) and whether it asked for a pause.
 * 2. The storage gate: nothing is sent while storage fails, or once it has failed since the job
 *    started (its queue lock may have been lost meanwhile).
 * 3. The breaker: an open or probing circuit, or a slow endpoint, defers; a first contact in flight
 *    is waited for in the process (until `giveUp`, and while it has been in flight less than
 *    `suspectHoldMs`: past that it is likely hanging).
 * 4. The endpoint's flow: a Retry-After pause defers to its end; at its concurrency limit the
 *    delivery waits in the process for room (holding no slot) for at most `roomWaitMs`, then
 *    defers; held only by the worker's own slots, it waits for them as for a slot.
 * 5. A send slot, waited for in turn (healthy endpoints always keep part of them, so the wait ends);
 *    then the gate and the breaker again, since both may have changed meanwhile; a suspect attempt
 *    that finds the suspect share taken defers.
 * 6. The breaker's ticket, taken before the token's round trip so that deliveries racing for the
 *    endpoint see it in flight (a first contact stays one).
 * 7. A rate-limited webhook's token, last, just before the send, so tokens cannot pile up ahead of
 *    their sends; refused, the delivery takes its place in the line.
 * Steps 1 to 6 need no I/O once the endpoint is known, and then run synchronously.
 */

/** A batch's signal to stop waiting for first contacts: `given` once the batch gave up, `when` resolves then. */
export interface GiveUp {
  readonly given: boolean;
  readonly when: Promise<void>;
}

/** Never waits for a first contact: single jobs are deferred instead. */
export const GIVE_UP_NOW: GiveUp = { given: true, when: Promise.resolve() };

/** One round of waiting for first contacts: the deliveries that began admission in it give up together (a batch's). */
export function giveUpRound(): GiveUp & { giveUp(): void } {
  let resolve: () => void = () => undefined;
  const round = { given: false, when: new Promise<void>((r) => (resolve = r)), giveUp: () => undefined as void };
  round.giveUp = () => {
    round.given = true;
    resolve();
  };
  return round;
}

/**
 * Gives up `ms` after admission first waits on it (a FIFO head's: a first contact answered within
 * that is waited for in the process, not deferred); the timer starts only when a wait does.
 */
export function giveUpAfter(ms: number): GiveUp {
  const round = giveUpRound();
  let timed = false;
  return {
    get given() {
      return round.given;
    },
    get when() {
      if (!timed) {
        timed = true;
        setTimeout(() => round.giveUp(), ms).unref();
      }
      return round.when;
    },
  };
}

export interface AdmitOptions {
  /** When the retry schedule made this attempt due. */
  dueAtMs: number;
  /** The storage gate's epoch when the job started. */
  epoch: number;
  giveUp: GiveUp;
  /** A replay or test event: probe an open circuit now. */
  forceProbe?: boolean;
  /**
   * The delivery's last attempt by the schedule: never recorded `circuit_open` unsent. Where an
   * earlier attempt would be, it is sent as the circuit's probe (deferred until the probe in flight
   * has its answer, if one is), so a dead letter always means the receiver was tried and failed.
   */
  lastAttempt?: boolean;
  /**
   * Spreads deliveries the breaker defers over this much past their retry time, so a herd held back
   * behind one endpoint does not come back at one instant (0: not spread).
   */
  deferJitterMs: number;
  /**
   * How long a delivery may wait in the process for room at its endpoint's concurrency limit (a
   * batch: not at all, since every batch a full endpoint holds holds the healthy deliveries of the
   * batches behind it, and the deferral's wakeup brings the delivery back as soon as there is room;
   * a single job 250 ms, rather than going back to the queue at once to find the endpoint full again).
   */
  roomWaitMs: number;
  /** Told when the delivery starts (true) and stops (false) waiting for a first contact's answer. */
  onWaiting?: (waiting: boolean) => void;
}

export interface AdmissionDeps {
  endpoints: Pick<EndpointRegistry, 'ofWebhook'>;
  flow: EndpointFlow;
  slots: SendSlots;
  gate: Pick<StorageGate, 'allows' | 'close'>;
  /** The shared send windows of webhooks with a `rate_limit_per_second`. */
  sendRate: SendRateLimiter;
  /** What workers know about receiver endpoints across processes and restarts; absent: nothing shared. */
  endpointMemory?: EndpointMemory;
  /** How long a first contact in flight is worth waiting for (see step 3). */
  suspectHoldMs: number;
  rules: DeferralRules;
  nowMs: () => number;
  random: () => number;
}

/** What the answer tells the endpoint: its breaker's health, its limit's flow signal, a pause, and whether it answered at all. */
export type EndpointAnswer = Pick<Interpretation, 'health' | 'flow' | 'retryAfterMs' | 'answered'>;

/**
 * Everything one admitted attempt holds, given back by `end()`, exactly once (a second call does
 * nothing). The receiver's answer reaches the endpoint through `settle()` as soon as it comes (its
 * breaker, its limit, the deliveries waiting on it), while the slot stays held until the attempt is
 * recorded (see the run's send step); an attempt ended unsettled was never sent, and is taken back
 * as if never started.
 */
export class Lease {
  /** The breaker's ticket, once taken (-1: not yet). */
  circuitTicket = -1;
  /** The send slot, once taken. */
  slot: 'none' | 'healthy' | 'suspect' = 'none';
  private settled = false;
  private ended = false;

  constructor(
    private readonly admission: Pick<EndpointAdmission, 'release'>,
    readonly endpoint: Endpoint,
    /** The ticket of its place under the endpoint's concurrency limit. */
    readonly flowTicket: number,
    /** The most attempts the endpoint's limit may grow to for this webhook. */
    readonly ceiling: number,
  ) {}

  /** The endpoint's answer, at `nowMs`. Once, before end(): a second answer is a bug. */
  settle(answer: EndpointAnswer, nowMs: number): void {
    if (this.settled || this.ended) throw new Error('a lease is settled once, before it ends');
    this.settled = true;
    this.admission.release(this, answer, nowMs);
  }

  /** Gives back everything still held. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.admission.release(this, this.settled ? SETTLED : undefined, 0);
  }
}

/** Marks a release whose answer the endpoint had already: only the slot is left to give back. */
const SETTLED = Symbol('settled');

/** Admission's answer: a lease, or why not. */
export type Admitted = Lease | NotAdmitted;

const STORAGE: NotAdmitted = { kind: 'storage' };
/** A last attempt that would be recorded `circuit_open`: admission starts over, probing the circuit now. */
const PROBE_NOW = Symbol('probe now');
/** The breaker's or the slots' state changed while a slot was waited for: start over. */
const AGAIN = Symbol('again');

/** How often a delivery waiting only for the worker's slots at its endpoint looks again by itself. */
const ROOM_RECHECK_MS = 250;

/** The admission of one worker process's attempts (see the top of this file). */
export class EndpointAdmission {
  constructor(private readonly deps: AdmissionDeps) {}

  /** May an attempt of `webhook`'s delivery start? Synchronous unless a step has to wait. */
  admit(webhook: Webhook, options: AdmitOptions): Admitted | Promise<Admitted> {
    const endpoint = this.deps.endpoints.ofWebhook(webhook);
    // 1. What other workers know of it.
    const answered = this.learnAnswered(endpoint);
    const paused = this.deps.flow.learnOf(endpoint);
    if (answered === undefined && paused === undefined)
      return this.admitOn(endpoint, webhook, options, this.deps.nowMs() + options.roomWaitMs);
    return Promise.all([answered, paused]).then(() =>
      this.admitOn(endpoint, webhook, options, this.deps.nowMs() + options.roomWaitMs),
    );
  }

  /** Steps 2 to 7, synchronously for as long as none has to wait. */
  private admitOn(
    endpoint: Endpoint,
    webhook: Webhook,
    options: AdmitOptions,
    roomWaitEndMs: number,
  ): Admitted | Promise<Admitted> {
    const reserved = this.reserve(endpoint, webhook, options, roomWaitEndMs);
    if (reserved instanceof Promise)
      return reserved.then(() => this.admitOn(endpoint, webhook, options, roomWaitEndMs));
    if (reserved === PROBE_NOW) return this.admitOn(endpoint, webhook, { ...options, forceProbe: true }, roomWaitEndMs);
    if (!(reserved instanceof Lease)) return reserved;
    // 5. A slot.
    if (!this.deps.slots.tryAcquire())
      return this.deps.slots.acquire().then(() => this.withSlot(reserved, endpoint, webhook, options, roomWaitEndMs));
    return this.withSlot(reserved, endpoint, webhook, options, roomWaitEndMs);
  }

  /** Steps 5 (after the slot) to 7. */
  private withSlot(
    lease: Lease,
    endpoint: Endpoint,
    webhook: Webhook,
    options: AdmitOptions,
    roomWaitEndMs: number,
  ): Admitted | Promise<Admitted> {
    lease.slot = 'healthy';
    // Its host came down while the slot was waited for, and is full: admission starts over, and
    // waits for the host (or defers) as any delivery to a full host does (see host.ts).
    if (!this.deps.flow.holdAtHost(endpoint, lease.flowTicket)) {
      lease.end();
      return this.admitOn(endpoint, webhook, options, roomWaitEndMs);
    }
    const started = this.start(lease, endpoint, webhook, options);
    if (started === AGAIN) return this.admitOn(endpoint, webhook, options, roomWaitEndMs);
    if (started !== lease || webhook.rateLimitPerSecond === undefined) return started;
    return this.takeToken(lease, webhook.id, webhook.rateLimitPerSecond, options);
  }

  /**
   * Steps 2 to 4: the gate, the breaker's first look, the endpoint's flow. A lease holding the
   * flow's ticket; or why not; or a wait, after which admission starts over.
   */
  private reserve(
    endpoint: Endpoint,
    webhook: Webhook,
    options: AdmitOptions,
    roomWaitEndMs: number,
  ): Lease | NotAdmitted | Promise<void> | typeof PROBE_NOW {
    const { deps } = this;
    // 2. The gate.
    if (!deps.gate.allows(options.epoch)) return STORAGE;
    // 3. The breaker.
    const nowMs = deps.nowMs();
    const pre = endpoint.circuit.admit(nowMs, options.forceProbe);
    if (!pre.admitted) {
      // A contact unanswered for longer than a batch may wait is not worth waiting for any more.
      const { retryAtMs } = pre;
      if (pre.reason === 'slow') return this.plan({ by: 'unproven', retryAtMs }, endpoint, options);
      if (pre.reason !== 'first_contact') {
        const held = this.plan({ by: 'circuit', reason: pre.reason, retryAtMs }, endpoint, options);
        if (held.kind !== 'circuit_open' || options.lastAttempt !== true) return held;
        // A last attempt is sent all the same: as the probe now; or, while a probe is in flight,
        // deferred (holding no slot while it hangs) until that probe has its answer, the wakeups
        // bringing it back then: as if due then, since the hold (how late an attempt may be tried)
        // no longer applies to it.
        if (pre.reason === 'open') return PROBE_NOW;
        return this.plan({ by: 'circuit', reason: 'probing', retryAtMs }, endpoint, { ...options, dueAtMs: retryAtMs });
      }
      if (options.giveUp.given || nowMs - pre.contactStartedMs >= deps.suspectHoldMs)
        return this.plan({ by: 'unproven', retryAtMs }, endpoint, options);
      options.onWaiting?.(true);
      return Promise.race([pre.settled, options.giveUp.when]).then(() => options.onWaiting?.(false));
    }
    // 4. The flow. A normal delivery takes no room that high-priority ones wait for.
    const ceiling = Math.min(webhook.maxConcurrency ?? deps.slots.total, deps.slots.total);
    const high = webhook.priority === 'high';
    const flow =
      high || endpoint.highWaiting === 0
        ? deps.flow.tryStart(endpoint, ceiling)
        : ({ started: false, reason: 'full' } as const);
    if (flow.started) return new Lease(this, endpoint, flow.ticket, ceiling);
    if (flow.reason === 'paused') return this.plan({ by: 'paused', untilMs: flow.untilMs }, endpoint, options);
    // An endpoint held only by the worker's own slots (it never pushed back, no max_concurrency) is
    // waited for as a slot is, however long (looking again every ROOM_RECHECK_MS in case a wakeup
    // went to a delivery that no longer needed it): deferring it would only add queue round trips.
    const bySlotsOnly = ceiling >= deps.slots.total && deps.flow.limitOf(endpoint) >= ceiling;
    const waitMs = bySlotsOnly ? ROOM_RECHECK_MS : roomWaitEndMs - nowMs;
    if (waitMs <= 0) return this.plan({ by: 'concurrency' }, endpoint, options);
    return deps.flow.waitForRoom(endpoint, waitMs, high);
  }

  /** Steps 5 (with the slot held) and 6: the lease itself when the attempt may start. */
  private start(
    lease: Lease,
    endpoint: Endpoint,
    webhook: Webhook,
    options: AdmitOptions,
  ): Lease | NotAdmitted | typeof AGAIN {
    const { deps } = this;
    if (!deps.gate.allows(options.epoch)) {
      lease.end();
      return STORAGE;
    }
    const nowMs = deps.nowMs();
    const admission = endpoint.circuit.admit(nowMs, options.forceProbe);
    if (!admission.admitted) {
      lease.end();
      return AGAIN;
    }
    if (admission.lane === 'suspect') {
      // The suspect share is taken: the wakeups send this endpoint a contact when a suspect slot frees.
      if (!deps.slots.markSuspect()) {
        lease.end();
        return this.plan({ by: 'suspect_share' }, endpoint, options);
      }
      lease.slot = 'suspect';
    }
    lease.circuitTicket = endpoint.circuit.start(nowMs, admission.probe, webhook.id);
    return lease;
  }

  /** Step 7: a send token of a rate-limited webhook (one round trip). */
  private async takeToken(
    lease: Lease,
    webhookId: string,
    ratePerSecond: number,
    options: AdmitOptions,
  ): Promise<Admitted> {
    let grant: Awaited<ReturnType<SendRateLimiter['take']>>;
    try {
      grant = await this.deps.sendRate.take(webhookId, ratePerSecond);
    } catch {
      // Storage fails: nothing is sent until it answers (the job runs again).
      this.deps.gate.close();
      lease.end();
      return STORAGE;
    }
    if (grant.sent) return lease;
    lease.end();
    return this.plan({ by: 'rate', retryInMs: grant.retryInMs }, lease.endpoint, options);
  }

  private plan(hold: HoldBack, endpoint: Endpoint, options: AdmitOptions): NotAdmitted {
    const { deps } = this;
    const delivery = {
      endpoint: endpoint.key,
      dueAtMs: options.dueAtMs,
      deferJitterMs: options.deferJitterMs,
    };
    return planDeferral(hold, delivery, deps.rules, deps.nowMs(), deps.random);
  }

  /**
   * The one place what a lease holds is given back. With the answer: the limit adapts, the breaker
   * counts it, other workers learn that the endpoint answers. At the end: the slot, and, when no
   * answer came (never sent), the endpoint's tickets, taken back as if never started.
   */
  release(lease: Lease, answer: EndpointAnswer | typeof SETTLED | undefined, nowMs: number): void {
    const { endpoint } = lease;
    if (answer !== undefined && answer !== SETTLED) {
      this.deps.flow.end(endpoint, lease.flowTicket, answer, lease.ceiling);
      endpoint.circuit.finish(lease.circuitTicket, answer.health, nowMs);
      if (answer.answered) this.shareAnswered(endpoint);
      return;
    }
    if (answer === undefined) {
      if (lease.circuitTicket !== -1) endpoint.circuit.cancel(lease.circuitTicket);
      this.deps.flow.cancel(endpoint, lease.flowTicket);
    }
    if (lease.slot !== 'none') this.deps.slots.release(lease.slot === 'suspect');
  }

  /** Learns, once per endpoint, whether another worker (or this one before a restart) saw it answer. */
  private learnAnswered(endpoint: Endpoint): Promise<void> | undefined {
    const memory = this.deps.endpointMemory;
    if (memory === undefined || endpoint.memoryLookup === true || endpoint.circuit.answered) return undefined;
    endpoint.memoryLookup ??= memory.answeredLately(endpoint.key).then(
      (answered) => {
        endpoint.memoryLookup = true;
        if (!answered) return;
        endpoint.circuit.markAnswered();
        endpoint.memoryShared = true;
      },
      // Unknown for now (storage failing): a first contact as without the memory; asked again later.
      () => void (endpoint.memoryLookup = undefined),
    );
    return endpoint.memoryLookup;
  }

  /** After an answer: tell other workers, once per endpoint and process, unless they told us. */
  private shareAnswered(endpoint: Endpoint): void {
    const memory = this.deps.endpointMemory;
    if (memory === undefined || endpoint.memoryShared) return;
    endpoint.memoryShared = true;
    memory.rememberAnswered(endpoint.key, this.deps.nowMs()).catch(() => (endpoint.memoryShared = false));
  }
}
