/** Tuning of the per-endpoint circuit breakers. */
export interface BreakerOptions {
  /** Consecutive failed attempts that open the circuit. */
  failureThreshold: number;
  /** First open period; doubles on every failed probe, up to `openMsMax`. */
  openMs: number;
  openMsMax: number;
  /** An attempt running longer than this counts as slow. */
  slowAfterMs: number;
  /** With this many slow attempts in flight, the endpoint gets no more slots until one ends. */
  slowInflightMax: number;
}

export const DEFAULT_BREAKER_OPTIONS: BreakerOptions = {
  failureThreshold: 5,
  openMs: 30_000,
  openMsMax: 5 * 60_000,
  slowAfterMs: 2_000,
  slowInflightMax: 2,
};

export type Admission = { admitted: true; probe: boolean } | { admitted: false; retryAtMs: number; reason: 'open' | 'probing' | 'slow' };

interface EndpointState {
  consecutiveFailures: number;
  /** Set while open (or half-open once it has passed). */
  openUntilMs: number | undefined;
  openMs: number;
  probeInFlight: boolean;
  /** Start times of attempts in flight, by ticket. */
  inflight: Map<number, number>;
}

const ENDPOINTS_MAX = 10_000;

/**
 * Per-endpoint isolation inside one worker process. An endpoint (URL origin) that keeps failing has
 * its circuit opened: its deliveries wait (delayed in the queue, no worker slot taken) until a single
 * probe succeeds. An endpoint whose attempts hang is capped at a few slow attempts in flight, so a
 * receiver that never answers cannot take the slots healthy receivers need.
 */
export class EndpointBreakers {
  private readonly states = new Map<string, EndpointState>();
  private nextTicket = 0;

  constructor(
    private readonly options: BreakerOptions = DEFAULT_BREAKER_OPTIONS,
    private readonly onStateChange: (endpoint: string, state: 'open' | 'half_open' | 'closed') => void = () => undefined,
  ) {}

  /** May an attempt to `endpoint` start now? */
  admit(endpoint: string, nowMs: number): Admission {
    const state = this.states.get(endpoint);
    if (!state) return { admitted: true, probe: false };
    if (state.openUntilMs !== undefined) {
      if (nowMs < state.openUntilMs) return { admitted: false, retryAtMs: state.openUntilMs, reason: 'open' };
      if (state.probeInFlight) return { admitted: false, retryAtMs: nowMs + Math.min(state.openMs, this.options.slowAfterMs * 2), reason: 'probing' };
      state.probeInFlight = true;
      this.onStateChange(endpoint, 'half_open');
      return { admitted: true, probe: true };
    }
    let slow = 0;
    for (const startedMs of state.inflight.values()) if (nowMs - startedMs >= this.options.slowAfterMs) slow += 1;
    if (slow >= this.options.slowInflightMax) return { admitted: false, retryAtMs: nowMs + this.options.slowAfterMs, reason: 'slow' };
    return { admitted: true, probe: false };
  }

  /** Marks an admitted attempt as started; pass the ticket to finish(). */
  start(endpoint: string, nowMs: number): number {
    const state = this.stateOf(endpoint);
    const ticket = this.nextTicket++;
    state.inflight.set(ticket, nowMs);
    return ticket;
  }

  /** Records how an attempt ended; `healthy` is false for timeouts, connection errors and 5xx/429. */
  finish(endpoint: string, ticket: number, healthy: boolean, nowMs: number): void {
    const state = this.stateOf(endpoint);
    state.inflight.delete(ticket);
    const wasProbe = state.openUntilMs !== undefined && state.probeInFlight;
    if (healthy) {
      const wasOpen = state.openUntilMs !== undefined;
      state.consecutiveFailures = 0;
      state.openUntilMs = undefined;
      state.openMs = this.options.openMs;
      state.probeInFlight = false;
      if (wasOpen) this.onStateChange(endpoint, 'closed');
      if (state.inflight.size === 0) this.states.delete(endpoint);
      return;
    }
    state.consecutiveFailures += 1;
    if (wasProbe) {
      state.probeInFlight = false;
      state.openMs = Math.min(state.openMs * 2, this.options.openMsMax);
      state.openUntilMs = nowMs + state.openMs;
      this.onStateChange(endpoint, 'open');
    } else if (state.openUntilMs === undefined && state.consecutiveFailures >= this.options.failureThreshold) {
      state.openUntilMs = nowMs + state.openMs;
      this.onStateChange(endpoint, 'open');
    }
  }

  /** Endpoints whose circuit is open now (for metrics and tests). */
  openEndpoints(nowMs: number): string[] {
    return [...this.states].filter(([, s]) => s.openUntilMs !== undefined && nowMs < s.openUntilMs).map(([endpoint]) => endpoint);
  }

  private stateOf(endpoint: string): EndpointState {
    let state = this.states.get(endpoint);
    if (!state) {
      if (this.states.size >= ENDPOINTS_MAX) this.evictIdle();
      state = { consecutiveFailures: 0, openUntilMs: undefined, openMs: this.options.openMs, probeInFlight: false, inflight: new Map() };
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
