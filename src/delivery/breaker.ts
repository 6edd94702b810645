import type { AttemptHealth } from './interpret.js';

/** Tuning of the per-endpoint circuit breakers. */
export interface BreakerOptions {
  /**
   * Failed attempts in a row (a `failed` or `timeout` health: see interpret.ts), counted in the order the
   * attempts started, that open the circuit of an endpoint with no healthy answer in `windowMs`.
   */
  failureThreshold: number;
  /** Timed-out attempts in a row (by start order) that open it, with no healthy answer in `windowMs`. */
  timeoutThreshold: number;
  /** The failure rate over `windowMs` that opens the circuit, once the window holds `minAttempts`. */
  failureRate: number;
  minAttempts: number;
  /** The recent window the failure rate and "no healthy answer lately" are judged over. */
  windowMs: number;
  /** First open period; doubles on every failed probe, up to `openMsMax`. */
  openMs: number;
  openMsMax: number;
  /** An attempt running longer than this counts as slow; the endpoint is then suspect. */
  slowAfterMs: number;
  /** Attempts in flight allowed to a suspect endpoint (one that was slow or timed out lately). */
  slowInflightMax: number;
  /** How long an attempt may run (the delivery timeout): when a held-back delivery should look again. */
  attemptTimeoutMs: number;
}

export const DEFAULT_BREAKER_OPTIONS: BreakerOptions = {
  failureThreshold: 5,
  timeoutThreshold: 2,
  // Three in four: a receiver that answers a quarter of its requests with 500 must never trip it by
  // chance (a window of 20 at 27 % failures reaches 75 % about once in a million), while one that
  // fails nearly everything opens within 20 attempts.
  failureRate: 0.75,
  minAttempts: 20,
  windowMs: 30_000,
  openMs: 30_000,
  openMsMax: 5 * 60_000,
  slowAfterMs: 2_000,
  slowInflightMax: 1,
  attemptTimeoutMs: 10_000,
};

/**
 * Whether an attempt may start now. An admitted attempt runs in the `suspect` lane when its
 * endpoint has not answered yet or was slow lately (the worker caps that lane so such endpoints
 * cannot take every slot), otherwise in the `healthy` lane. `first_contact`: the endpoint's first
 * attempt is still in flight; wait for `settled` (in the process) before sending more.
 */
export type Admission =
  | { admitted: true; probe: boolean; lane: 'healthy' | 'suspect' }
  | { admitted: false; reason: 'open' | 'probing' | 'slow'; retryAtMs: number }
  | { admitted: false; reason: 'first_contact'; settled: Promise<void>; retryAtMs: number; contactStartedMs: number };

/** Why a circuit opened. */
export type OpenReason = 'failure_rate' | 'consecutive_failures' | 'consecutive_timeouts' | 'probe_failed';

/** A circuit's change of state, with what an operator needs to find the webhooks behind it. */
export type CircuitChange =
  { state: 'open'; reason: OpenReason; openForMs: number; webhookIds: string[] } | { state: 'half_open' | 'closed'; webhookIds: string[] };

interface WindowBucket {
  startMs: number;
  total: number;
  failed: number;
}

interface EndpointState {
  /** Has ever answered with an HTTP response (of any status), here or (as learnt) in another worker. */
  answered: boolean;
  /** Failed attempts that started after the last attempt that got a healthy answer: ticket → timed out. */
  failedSinceHealthy: Map<number, boolean>;
  /** The latest-started attempt that got a healthy answer (-1: none yet). */
  lastHealthyTicket: number;
  /** When the last healthy answer came (-Infinity: none yet). */
  lastHealthyAtMs: number;
  /** Finished attempts by time, `WINDOW_BUCKETS` buckets over `windowMs`. */
  window: WindowBucket[];
  /** Suspect until then: a slow or timed-out attempt happened lately. */
  suspectUntilMs: number;
  /** Set while open (or half-open once it has passed). */
  openUntilMs: number | undefined;
  openMs: number;
  probeInFlight: boolean;
  /** Start times of attempts in flight, by ticket. */
  inflight: Map<number, number>;
  /** Resolved (and replaced) whenever an attempt to the endpoint ends. */
  settle: { promise: Promise<void>; resolve: () => void } | undefined;
  /** Webhooks that sent to this endpoint lately (most recent last), for the circuit's log lines. */
  webhookIds: string[];
}

const ENDPOINTS_MAX = 10_000;
const WINDOW_BUCKETS = 10;
/** Webhook ids remembered per endpoint for log lines. */
const WEBHOOK_IDS_MAX = 10;
/** Failures counted toward a run at most; more change nothing (the circuit is open by then). */
const FAILED_RUN_MAX = 1_000;

/**
 * Per-endpoint isolation inside one worker process (an endpoint is one vendor's origin, see
 * domain/endpoint.ts: another vendor's failures on the same origin never count here).
 * - First contact: an endpoint that has never answered gets one attempt in flight; the others wait
 *   for its answer, so a receiver that accepts connections and never answers costs one slot, not many.
 * - Suspect: after a slow (≥ slowAfterMs) or timed-out attempt, the endpoint gets `slowInflightMax`
 *   attempts in flight until it answers in time again.
 * - Open: its deliveries are not sent until a single probe succeeds. It opens when the failure rate
 *   over the recent window passes `failureRate` (with at least `minAttempts` in it); or, with no
 *   healthy answer in the window, after `failureThreshold` failures or `timeoutThreshold` timeouts
 *   in a row (an endpoint that never answered included: one hang at first contact is bad luck, two
 *   are an endpoint that hangs). "In a row" counts attempts in the order they started, not the
 *   order they ended: a timeout always ends one timeout after it started, so two stray hangs of one
 *   burst end back to back after the burst's fast answers, and must not count as two timeouts in a
 *   row when later-started attempts were answered.
 * An endpoint that answered stays known (bounded by ENDPOINTS_MAX), so it is not on probation again.
 */
export class EndpointBreakers {
  private readonly states = new Map<string, EndpointState>();
  private nextTicket = 0;

  constructor(
    private readonly options: BreakerOptions = DEFAULT_BREAKER_OPTIONS,
    private readonly onStateChange: (endpoint: string, change: CircuitChange) => void = () => undefined,
  ) {}

  /**
   * May an attempt to `endpoint` start now? Admission is only held by calling start() right away.
   * `forceProbe` (a replay or test event a vendor asked for): an open circuit with no probe in flight
   * is probed now instead of at the end of its open period.
   */
  admit(endpoint: string, nowMs: number, forceProbe = false): Admission {
    const state = this.states.get(endpoint);
    if (!state) return { admitted: true, probe: false, lane: 'suspect' };
    if (state.openUntilMs !== undefined) {
      if (state.probeInFlight) return { admitted: false, retryAtMs: nowMs + Math.min(state.openMs, this.options.slowAfterMs * 2), reason: 'probing' };
      if (nowMs < state.openUntilMs && !forceProbe) return { admitted: false, retryAtMs: state.openUntilMs, reason: 'open' };
      return { admitted: true, probe: true, lane: 'suspect' };
    }
    if (!state.answered) {
      if (state.inflight.size === 0) return { admitted: true, probe: false, lane: 'suspect' };
      return {
        admitted: false,
        reason: 'first_contact',
        settled: this.settledOf(state),
        retryAtMs: this.afterInflight(state, nowMs),
        contactStartedMs: Math.min(...state.inflight.values()),
      };
    }
    let slow = 0;
    for (const startedMs of state.inflight.values()) if (nowMs - startedMs >= this.options.slowAfterMs) slow += 1;
    const suspect = slow > 0 || nowMs < state.suspectUntilMs;
    if (!suspect) return { admitted: true, probe: false, lane: 'healthy' };
    if (state.inflight.size >= this.options.slowInflightMax) return { admitted: false, retryAtMs: this.afterInflight(state, nowMs), reason: 'slow' };
    return { admitted: true, probe: false, lane: 'suspect' };
  }

  /** Marks an admitted attempt as started (call right after admit()); pass the ticket to finish(). */
  start(endpoint: string, nowMs: number, probe = false, webhookId?: string): number {
    const state = this.stateOf(endpoint);
    if (webhookId !== undefined) rememberWebhook(state, webhookId);
    if (probe && !state.probeInFlight) {
      state.probeInFlight = true;
      this.onStateChange(endpoint, { state: 'half_open', webhookIds: [...state.webhookIds] });
    }
    const ticket = this.nextTicket++;
    state.inflight.set(ticket, nowMs);
    return ticket;
  }

  /**
   * Takes back a started attempt that was not sent (its webhook's rate limit held it back): it counts
   * for nothing, and deliveries waiting on the endpoint look again. A probe taken back leaves the
   * circuit open with its period over, so the next delivery probes.
   */
  cancel(endpoint: string, ticket: number): void {
    const state = this.states.get(endpoint);
    if (!state?.inflight.delete(ticket)) return;
    if (state.openUntilMs !== undefined) state.probeInFlight = false;
    const settle = state.settle;
    state.settle = undefined;
    settle?.resolve();
  }

  /** Records how an attempt ended, its health as interpret.ts reads the answer. */
  finish(endpoint: string, ticket: number, health: AttemptHealth, nowMs: number): void {
    const state = this.stateOf(endpoint);
    const startedMs = state.inflight.get(ticket) ?? nowMs;
    state.inflight.delete(ticket);
    const wasProbe = state.openUntilMs !== undefined && state.probeInFlight;
    if (health !== 'timeout') state.answered = true;
    if (nowMs - startedMs >= this.options.slowAfterMs || health === 'timeout') state.suspectUntilMs = nowMs + this.options.openMs;
    this.count(state, nowMs, health !== 'healthy');
    if (health === 'healthy') {
      const wasOpen = state.openUntilMs !== undefined;
      state.lastHealthyAtMs = nowMs;
      if (ticket > state.lastHealthyTicket) {
        state.lastHealthyTicket = ticket;
        for (const failed of state.failedSinceHealthy.keys()) if (failed < ticket) state.failedSinceHealthy.delete(failed);
      }
      if (nowMs - startedMs < this.options.slowAfterMs) state.suspectUntilMs = 0;
      if (wasOpen) {
        state.openUntilMs = undefined;
        state.openMs = this.options.openMs;
        state.probeInFlight = false;
        // A fresh start: the failures that opened it are history once a probe got through.
        state.failedSinceHealthy.clear();
        state.window = [];
        this.onStateChange(endpoint, { state: 'closed', webhookIds: [...state.webhookIds] });
      }
    } else {
      if (ticket > state.lastHealthyTicket && state.failedSinceHealthy.size < FAILED_RUN_MAX) state.failedSinceHealthy.set(ticket, health === 'timeout');
      if (wasProbe) {
        state.probeInFlight = false;
        state.openMs = Math.min(state.openMs * 2, this.options.openMsMax);
        this.open(endpoint, state, nowMs, 'probe_failed');
      } else if (state.openUntilMs === undefined) {
        const reason = this.openReason(state, nowMs);
        if (reason !== undefined) this.open(endpoint, state, nowMs, reason);
      }
    }
    const settle = state.settle;
    state.settle = undefined;
    settle?.resolve();
  }

  /**
   * Marks an endpoint as one that has answered before (another worker saw it answer), so its
   * first attempt here is not a first contact that the rest of a burst must wait behind.
   */
  markAnswered(endpoint: string): void {
    this.stateOf(endpoint).answered = true;
  }

  /** Whether `endpoint` has answered, here or as learnt through markAnswered(). */
  hasAnswered(endpoint: string): boolean {
    return this.states.get(endpoint)?.answered ?? false;
  }

  /** Whether an attempt to `endpoint` is in flight in this process. */
  hasInflight(endpoint: string): boolean {
    return (this.states.get(endpoint)?.inflight.size ?? 0) > 0;
  }

  /** Resolves when the next attempt to `endpoint` ends (at once when nothing is in flight). */
  settled(endpoint: string): Promise<void> {
    const state = this.states.get(endpoint);
    if (!state || state.inflight.size === 0) return Promise.resolve();
    return this.settledOf(state);
  }

  /** Endpoints whose circuit is open now (for metrics and tests). */
  openEndpoints(nowMs: number): string[] {
    return [...this.states].filter(([, s]) => s.openUntilMs !== undefined && nowMs < s.openUntilMs).map(([endpoint]) => endpoint);
  }

  /** The rule that opens the circuit after this failure, if one does. */
  private openReason(state: EndpointState, nowMs: number): OpenReason | undefined {
    const { total, failed } = this.windowCounts(state, nowMs);
    if (total >= this.options.minAttempts && failed >= total * this.options.failureRate) return 'failure_rate';
    // Runs in a row open only an endpoint with no healthy answer lately: a mostly healthy endpoint
    // has runs of bad luck, an endpoint that is down has nothing else.
    if (nowMs - state.lastHealthyAtMs < this.options.windowMs) return undefined;
    if (state.failedSinceHealthy.size >= this.options.failureThreshold) return 'consecutive_failures';
    let timeouts = 0;
    for (const timedOut of state.failedSinceHealthy.values()) if (timedOut) timeouts += 1;
    return timeouts >= this.options.timeoutThreshold ? 'consecutive_timeouts' : undefined;
  }

  private open(endpoint: string, state: EndpointState, nowMs: number, reason: OpenReason): void {
    state.openUntilMs = nowMs + state.openMs;
    this.onStateChange(endpoint, { state: 'open', reason, openForMs: state.openMs, webhookIds: [...state.webhookIds] });
  }

  /** Counts a finished attempt into the window's bucket of `nowMs`. */
  private count(state: EndpointState, nowMs: number, failed: boolean): void {
    const bucketMs = this.options.windowMs / WINDOW_BUCKETS;
    const startMs = nowMs - (nowMs % bucketMs);
    let bucket = state.window.at(-1);
    if (bucket === undefined || bucket.startMs !== startMs) {
      bucket = { startMs, total: 0, failed: 0 };
      state.window.push(bucket);
      while (state.window.length > WINDOW_BUCKETS || (state.window[0] && state.window[0].startMs <= nowMs - this.options.windowMs)) state.window.shift();
    }
    bucket.total += 1;
    if (failed) bucket.failed += 1;
  }

  private windowCounts(state: EndpointState, nowMs: number): { total: number; failed: number } {
    let total = 0;
    let failed = 0;
    for (const bucket of state.window) {
      if (bucket.startMs <= nowMs - this.options.windowMs) continue;
      total += bucket.total;
      failed += bucket.failed;
    }
    return { total, failed };
  }

  /** When the oldest attempt in flight will have ended at the latest (answered or timed out). */
  private afterInflight(state: EndpointState, nowMs: number): number {
    let oldestMs = nowMs;
    for (const startedMs of state.inflight.values()) oldestMs = Math.min(oldestMs, startedMs);
    return Math.max(nowMs + 250, oldestMs + this.options.attemptTimeoutMs + 100);
  }

  private settledOf(state: EndpointState): Promise<void> {
    if (!state.settle) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      state.settle = { promise, resolve };
    }
    return state.settle.promise;
  }

  private stateOf(endpoint: string): EndpointState {
    let state = this.states.get(endpoint);
    if (!state) {
      if (this.states.size >= ENDPOINTS_MAX) this.evictIdle();
      state = {
        answered: false,
        failedSinceHealthy: new Map(),
        lastHealthyTicket: -1,
        lastHealthyAtMs: -Infinity,
        window: [],
        suspectUntilMs: 0,
        openUntilMs: undefined,
        openMs: this.options.openMs,
        probeInFlight: false,
        inflight: new Map(),
        settle: undefined,
        webhookIds: [],
      };
      this.states.set(endpoint, state);
    }
    return state;
  }

  /** Forgets endpoints with nothing in flight and a closed circuit (bounded memory). */
  private evictIdle(): void {
    for (const [endpoint, state] of this.states) {
      if (state.inflight.size === 0 && state.openUntilMs === undefined) this.states.delete(endpoint);
    }
  }
}

function rememberWebhook(state: EndpointState, webhookId: string): void {
  if (state.webhookIds.at(-1) === webhookId) return;
  const at = state.webhookIds.indexOf(webhookId);
  if (at !== -1) state.webhookIds.splice(at, 1);
  state.webhookIds.push(webhookId);
  if (state.webhookIds.length > WEBHOOK_IDS_MAX) state.webhookIds.shift();
}
