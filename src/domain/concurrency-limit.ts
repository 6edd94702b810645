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
 * arguments, so it is tested with a fixed clock. Tickets are the limit's own, so comparing them
 * orders one endpoint's attempts.
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
export type FlowAdmission =
  | { started: true; ticket: number }
  | { started: false; reason: 'full' }
  | { started: false; reason: 'paused'; untilMs: number };

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

/** Refused for being at the limit: the same answer every time, so refusing allocates nothing. */
const FULL: FlowAdmission = { started: false, reason: 'full' };

/**
 * One endpoint's limit (the registry of endpoints, src/delivery/endpoints/registry.ts, holds one per
 * endpoint and bounds how many it keeps).
 */
export class ConcurrencyLimit {
  /** 0 until the first attempt sets it to its ceiling (a pause heard first creates the limit). */
  private limit = 0;
  /** Successes counted toward the next increase. */
  private successes = 0;
  /** The limit when the endpoint last pushed back (0: never). */
  private pushedBackAt = 0;
  /** Attempts with a ticket at or below this started before the last decrease. */
  private decreasedAtTicket = 0;
  /** In flight: ticket → whether it started with at least half the limit in use. */
  private readonly inflight = new Map<number, boolean>();
  private pausedUntilMs = 0;
  private nextTicket = 1;

  /** Starts an attempt when the endpoint is neither paused nor at min(limit, ceiling); end it with end() or cancel(). */
  tryStart(ceiling: number, nowMs: number): FlowAdmission {
    if (this.limit === 0) this.limit = ceiling;
    if (nowMs < this.pausedUntilMs) return { started: false, reason: 'paused', untilMs: this.pausedUntilMs };
    if (this.inflight.size >= Math.min(this.limit, ceiling)) return FULL;
    const ticket = this.nextTicket++;
    this.inflight.set(ticket, (this.inflight.size + 1) * 2 >= this.limit);
    return { started: true, ticket };
  }

  /** The limit now (0 until the first attempt set it), without the view's object. */
  get current(): number {
    return this.limit;
  }

  /** How many more attempts could start now (the wakeups ask before bringing deferred ones back). */
  room(nowMs: number): number {
    if (nowMs < this.pausedUntilMs) return 0;
    return this.limit === 0 ? Infinity : Math.max(0, this.limit - this.inflight.size);
  }

  /** Ends a started attempt and adapts the limit to how it went. */
  end(ticket: number, signal: FlowSignal, ceiling: number): FlowChange {
    const usedHalf = this.inflight.get(ticket);
    if (usedHalf === undefined) return { limit: this.limit, decreased: false };
    this.inflight.delete(ticket);
    if (signal === 'congested') {
      // Started before the last decrease: that congestion has been answered already.
      if (ticket <= this.decreasedAtTicket) return { limit: this.limit, decreased: false };
      return this.pushBack(ceiling);
    }
    if (signal === 'ok' && usedHalf && this.limit < ceiling) {
      this.successes += 1;
      const windows = this.limit + 1 >= this.pushedBackAt ? PROBE_WINDOWS : 1;
      if (this.successes >= this.limit * windows) {
        this.limit += 1;
        this.successes = 0;
      }
    }
    return { limit: this.limit, decreased: false };
  }

  /**
   * Halves the limit (from at most `ceiling`) on push-back; end() does it for an attempt it
   * started, a caller for one it counted no ticket for (see src/delivery/endpoints/host.ts).
   */
  pushBack(ceiling: number): FlowChange {
    this.pushedBackAt = Math.min(this.limit || ceiling, ceiling);
    this.limit = Math.max(1, Math.floor(this.pushedBackAt / 2));
    this.successes = 0;
    this.decreasedAtTicket = this.nextTicket - 1;
    return { limit: this.limit, decreased: true };
  }

  /** Takes back a started attempt that was never sent: it says nothing about the endpoint. */
  cancel(ticket: number): void {
    this.inflight.delete(ticket);
  }

  /** Pauses the endpoint until `untilMs` (capped at PAUSE_MS_MAX from now); a shorter pause never cuts a longer one. Returns the pause's end. */
  pause(untilMs: number, nowMs: number): number {
    this.pausedUntilMs = Math.max(this.pausedUntilMs, Math.min(untilMs, nowMs + PAUSE_MS_MAX));
    return this.pausedUntilMs;
  }

  /** The limit, attempts in flight and pause, as this process sees them. */
  view(nowMs: number): FlowView {
    return {
      limit: this.limit,
      inflight: this.inflight.size,
      pausedUntilMs: nowMs < this.pausedUntilMs ? this.pausedUntilMs : undefined,
    };
  }

  /** Nothing in flight and no pause: forgetting it loses only what the limit learnt. */
  idle(nowMs: number): boolean {
    return this.inflight.size === 0 && nowMs >= this.pausedUntilMs;
  }
}
