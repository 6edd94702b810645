/**
 * Adaptive concurrency per receiver endpoint: additive increase, multiplicative decrease (AIMD), the
 * rule TCP uses to share a link, applied to the attempts one worker keeps in flight to an endpoint.
 *
 * - The limit starts at the ceiling: a receiver that never pushes back is never held under it, so
 *   healthy endpoints keep their throughput (an unknown endpoint is already held to one attempt
 *   until it first answers, by the breaker's first-contact rule). TCP's slow start was tried
 *   instead (4, then one more per success): it deferred bursts to healthy receivers for nothing.
 * - After a push-back it grows by one per window of `limit` successes back up to just under the
 *   limit that last pushed back, then probes gently, one per PROBE_WINDOWS windows (as CUBIC
 *   dwells near its last maximum): a receiver with a fixed capacity is then overrun once every
 *   several round trips instead of every other one, which keeps its share of 429s low and the
 *   limit near the capacity most of the time (figures in docs/delivery-semantics.md).
 * - It halves (floor 1) on push-back: 429, 503, a timeout or a connection error. At most once per
 *   window: an attempt that started before the last decrease reports the old limit's congestion,
 *   so a burst of concurrent 429s halves the limit once, not down to 1.
 * - A success counts toward growth only when its attempt started with at least half the limit in
 *   use: an endpoint that only ever gets a trickle does not grow a limit it never tried.
 * - The ceiling (the webhook's `max_concurrency`, else the worker's send slots) is given with each
 *   attempt: the limit never grows past the ceiling of the attempt that succeeded, and admission
 *   holds in-flight attempts under the smaller of both.
 * A receiver's `Retry-After` pauses the endpoint until a time (see `pause`). Pure: time comes in as
 * arguments, so it is tested with a fixed clock.
 */

/** How one attempt ended, for the limiter: `congested` halves the limit, `neutral` changes nothing. */
export type FlowSignal = 'ok' | 'congested' | 'neutral';

/** Windows of successes per increase once the limit is back near the one that last pushed back. */
const PROBE_WINDOWS = 8;

/** The largest `max_concurrency` a webhook may set. */
export const MAX_CONCURRENCY_MAX = 1_000;

/** The longest pause a receiver's Retry-After can put on its endpoint. */
export const PAUSE_MS_MAX = 5 * 60_000;

/** Whether a delivery to an endpoint may start: `paused` until a time, or `full` at its limit. */
export type FlowAdmission = { started: true; ticket: number } | { started: false; reason: 'full' } | { started: false; reason: 'paused'; untilMs: number };

/** What an ended attempt did to the limit. */
export interface FlowChange {
  limit: number;
  decreased: boolean;
}

/** An endpoint's flow state as shown in stats. */
export interface FlowView {
  /** 0 until an attempt to the endpoint set it (a pause was heard first). */
  limit: number;
  inflight: number;
  pausedUntilMs: number | undefined;
}

interface FlowState {
  /** 0 until the first attempt sets it to its ceiling (a pause heard first creates the state). */
  limit: number;
  /** Successes counted toward the next increase. */
  successes: number;
  /** The limit when the endpoint last pushed back (0: never). */
  pushedBackAt: number;
  /** Attempts with a ticket at or below this started before the last decrease. */
  decreasedAtTicket: number;
  /** In flight: ticket → whether it started with at least half the limit in use. */
  inflight: Map<number, boolean>;
  pausedUntilMs: number;
}

const ENDPOINTS_MAX = 10_000;

export class ConcurrencyLimits {
  private readonly states = new Map<string, FlowState>();
  private nextTicket = 1;

  /** Starts an attempt when the endpoint is neither paused nor at min(limit, ceiling); end it with end() or cancel(). */
  tryStart(endpoint: string, ceiling: number, nowMs: number): FlowAdmission {
    const state = this.stateOf(endpoint);
    if (state.limit === 0) state.limit = ceiling;
    if (nowMs < state.pausedUntilMs) return { started: false, reason: 'paused', untilMs: state.pausedUntilMs };
    if (state.inflight.size >= Math.min(state.limit, ceiling)) return { started: false, reason: 'full' };
    const ticket = this.nextTicket++;
    state.inflight.set(ticket, (state.inflight.size + 1) * 2 >= state.limit);
    return { started: true, ticket };
  }

  /** Whether a delivery could start now (the wakeups ask before bringing deferred ones back). */
  room(endpoint: string, nowMs: number): number {
    const state = this.states.get(endpoint);
    if (state === undefined) return Infinity;
    if (nowMs < state.pausedUntilMs) return 0;
    return state.limit === 0 ? Infinity : Math.max(0, state.limit - state.inflight.size);
  }

  /** Ends a started attempt and adapts the limit to how it went. */
  end(endpoint: string, ticket: number, signal: FlowSignal, ceiling: number): FlowChange {
    const state = this.states.get(endpoint);
    if (state === undefined) return { limit: ceiling, decreased: false };
    const usedHalf = state.inflight.get(ticket);
    if (usedHalf === undefined) return { limit: state.limit, decreased: false };
    state.inflight.delete(ticket);
    if (signal === 'congested') {
      // Started before the last decrease: that congestion has been answered already.
      if (ticket <= state.decreasedAtTicket) return { limit: state.limit, decreased: false };
      state.pushedBackAt = Math.min(state.limit, ceiling);
      state.limit = Math.max(1, Math.floor(state.pushedBackAt / 2));
      state.successes = 0;
      state.decreasedAtTicket = this.nextTicket - 1;
      return { limit: state.limit, decreased: true };
    }
    if (signal === 'ok' && usedHalf && state.limit < ceiling) {
      state.successes += 1;
      const windows = state.limit + 1 >= state.pushedBackAt ? PROBE_WINDOWS : 1;
      if (state.successes >= state.limit * windows) {
        state.limit += 1;
        state.successes = 0;
      }
    }
    return { limit: state.limit, decreased: false };
  }

  /** Takes back a started attempt that was never sent: it says nothing about the endpoint. */
  cancel(endpoint: string, ticket: number): void {
    this.states.get(endpoint)?.inflight.delete(ticket);
  }

  /** Pauses the endpoint until `untilMs` (capped at PAUSE_MS_MAX from now); a shorter pause never cuts a longer one. Returns the pause's end. */
  pause(endpoint: string, untilMs: number, nowMs: number): number {
    const state = this.stateOf(endpoint);
    state.pausedUntilMs = Math.max(state.pausedUntilMs, Math.min(untilMs, nowMs + PAUSE_MS_MAX));
    return state.pausedUntilMs;
  }

  /** The endpoint's limit, attempts in flight and pause, as this process sees them (undefined: never met). */
  view(endpoint: string, nowMs: number): FlowView | undefined {
    const state = this.states.get(endpoint);
    if (state === undefined) return undefined;
    return { limit: state.limit, inflight: state.inflight.size, pausedUntilMs: nowMs < state.pausedUntilMs ? state.pausedUntilMs : undefined };
  }

  private stateOf(endpoint: string): FlowState {
    let state = this.states.get(endpoint);
    if (state === undefined) {
      if (this.states.size >= ENDPOINTS_MAX) this.evictIdle();
      state = {
        limit: 0,
        successes: 0,
        pushedBackAt: 0,
        decreasedAtTicket: 0,
        inflight: new Map(),
        pausedUntilMs: 0,
      };
      this.states.set(endpoint, state);
    }
    return state;
  }

  /** Forgets endpoints with nothing in flight (bounded memory); they start over when met again. */
  private evictIdle(): void {
    for (const [endpoint, state] of this.states) if (state.inflight.size === 0) this.states.delete(endpoint);
  }
}
