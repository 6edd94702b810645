/** Tuning of the per-endpoint circuit breakers. */
export interface BreakerOptions {
  /** Consecutive failed attempts (5xx, 429, connection errors) that open the circuit. */
  failureThreshold: number;
  /** Consecutive timed-out attempts that open the circuit: a hanging endpoint costs a slot per attempt. */
  timeoutThreshold: number;
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
  | { admitted: false; reason: 'first_contact'; settled: Promise<void>; retryAtMs: number };

/** How an attempt ended, for the breaker: a response in time, a failure, or a timeout. */
export type AttemptHealth = 'healthy' | 'failed' | 'timeout';

interface EndpointState {
  /** Has ever answered with an HTTP response (of any status). */
  answered: boolean;
  consecutiveFailures: number;
  consecutiveTimeouts: number;
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
}

const ENDPOINTS_MAX = 10_000;

/**
 * Per-endpoint isolation inside one worker process.
 * - First contact: an endpoint that has never answered gets one attempt in flight; the others wait
 *   for its answer, so a receiver that accepts connections and never answers costs one slot, not many.
 * - Suspect: after a slow (≥ slowAfterMs) or timed-out attempt, the endpoint gets `slowInflightMax`
 *   attempts in flight until it answers in time again.
 * - Open: after `failureThreshold` failures or `timeoutThreshold` timeouts in a row (or a first
 *   contact that timed out), its deliveries wait in the queue (delayed, no slot taken) until a
 *   single probe succeeds.
 * An endpoint that answered stays known (bounded by ENDPOINTS_MAX), so it is not on probation again.
 */
export class EndpointBreakers {
  private readonly states = new Map<string, EndpointState>();
  private nextTicket = 0;

  constructor(
    private readonly options: BreakerOptions = DEFAULT_BREAKER_OPTIONS,
    private readonly onStateChange: (endpoint: string, state: 'open' | 'half_open' | 'closed') => void = () => undefined,
  ) {}

  /** May an attempt to `endpoint` start now? Admission is only held by calling start() right away. */
  admit(endpoint: string, nowMs: number): Admission {
    const state = this.states.get(endpoint);
    if (!state) return { admitted: true, probe: false, lane: 'suspect' };
    if (state.openUntilMs !== undefined) {
      if (nowMs < state.openUntilMs) return { admitted: false, retryAtMs: state.openUntilMs, reason: 'open' };
      if (state.probeInFlight) return { admitted: false, retryAtMs: nowMs + Math.min(state.openMs, this.options.slowAfterMs * 2), reason: 'probing' };
      return { admitted: true, probe: true, lane: 'suspect' };
    }
    if (!state.answered) {
      if (state.inflight.size === 0) return { admitted: true, probe: false, lane: 'suspect' };
      return { admitted: false, reason: 'first_contact', settled: this.settledOf(state), retryAtMs: this.afterInflight(state, nowMs) };
    }
    let slow = 0;
    for (const startedMs of state.inflight.values()) if (nowMs - startedMs >= this.options.slowAfterMs) slow += 1;
    const suspect = slow > 0 || nowMs < state.suspectUntilMs;
    if (!suspect) return { admitted: true, probe: false, lane: 'healthy' };
    if (state.inflight.size >= this.options.slowInflightMax) return { admitted: false, retryAtMs: this.afterInflight(state, nowMs), reason: 'slow' };
    return { admitted: true, probe: false, lane: 'suspect' };
  }

  /** Marks an admitted attempt as started (call right after admit()); pass the ticket to finish(). */
  start(endpoint: string, nowMs: number, probe = false): number {
    const state = this.stateOf(endpoint);
    if (probe && !state.probeInFlight) {
      state.probeInFlight = true;
      this.onStateChange(endpoint, 'half_open');
    }
    const ticket = this.nextTicket++;
    state.inflight.set(ticket, nowMs);
    return ticket;
  }

  /** Records how an attempt ended. `failed`: connection errors and 5xx/429; `timeout`: no answer in time. */
  finish(endpoint: string, ticket: number, health: AttemptHealth, nowMs: number): void {
    const state = this.stateOf(endpoint);
    const startedMs = state.inflight.get(ticket) ?? nowMs;
    state.inflight.delete(ticket);
    const wasProbe = state.openUntilMs !== undefined && state.probeInFlight;
    if (health !== 'timeout') state.answered = true;
    if (nowMs - startedMs >= this.options.slowAfterMs || health === 'timeout') state.suspectUntilMs = nowMs + this.options.openMs;
    if (health === 'healthy') {
      const wasOpen = state.openUntilMs !== undefined;
      state.consecutiveFailures = 0;
      state.consecutiveTimeouts = 0;
      state.openUntilMs = undefined;
      state.openMs = this.options.openMs;
      state.probeInFlight = false;
      if (nowMs - startedMs < this.options.slowAfterMs) state.suspectUntilMs = 0;
      if (wasOpen) this.onStateChange(endpoint, 'closed');
    } else {
      state.consecutiveFailures += 1;
      state.consecutiveTimeouts = health === 'timeout' ? state.consecutiveTimeouts + 1 : 0;
      if (wasProbe) {
        state.probeInFlight = false;
        state.openMs = Math.min(state.openMs * 2, this.options.openMsMax);
        state.openUntilMs = nowMs + state.openMs;
        this.onStateChange(endpoint, 'open');
      } else if (
        state.openUntilMs === undefined &&
        (state.consecutiveFailures >= this.options.failureThreshold ||
          state.consecutiveTimeouts >= this.options.timeoutThreshold ||
          // First contact timed out: an endpoint that never answered gets no second free attempt.
          (health === 'timeout' && !state.answered))
      ) {
        state.openUntilMs = nowMs + state.openMs;
        this.onStateChange(endpoint, 'open');
      }
    }
    const settle = state.settle;
    state.settle = undefined;
    settle?.resolve();
  }

  /** Endpoints whose circuit is open now (for metrics and tests). */
  openEndpoints(nowMs: number): string[] {
    return [...this.states].filter(([, s]) => s.openUntilMs !== undefined && nowMs < s.openUntilMs).map(([endpoint]) => endpoint);
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
        consecutiveFailures: 0,
        consecutiveTimeouts: 0,
        suspectUntilMs: 0,
        openUntilMs: undefined,
        openMs: this.options.openMs,
        probeInFlight: false,
        inflight: new Map(),
        settle: undefined,
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

/** The breaker key of a callback URL: its origin (scheme, host, port). */
export function endpointOf(callbackUrl: string): string {
  try {
    return new URL(callbackUrl).origin;
  } catch {
    return callbackUrl;
  }
}
