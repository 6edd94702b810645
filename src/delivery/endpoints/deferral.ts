/**
 * When a delivery that admission holds back comes back, apart from the admission's state and timers
 * so it is tested with a fixed clock and random source. A deferral is no attempt: the delivery is
 * put back in the queue (a delayed job, a park, a FIFO line's ready time) until `retryAtMs`, and,
 * when it waits behind its endpoint (`wakeOn`), the wakeups (wakeups.ts) bring it back as soon as
 * the endpoint takes deliveries again.
 */

/**
 * Why a delivery was put back without an attempt: its endpoint's breaker (open, probing, slow), its
 * webhook's rate limit, its endpoint's concurrency limit, a pause its endpoint asked for
 * (Retry-After), or its webhook paused by its vendor (held until enabled; see pause-holds.ts).
 */
export type DeferReason = 'open' | 'probing' | 'slow' | 'rate_limited' | 'concurrency' | 'paused' | 'webhook_paused';

/**
 * A delivery admission did not let start: deferred until `retryAtMs` (woken earlier when `wakeOn`,
 * its endpoint's key, takes deliveries again); or due past what an open circuit may hold it (record
 * the attempt as `circuit_open`); or storage is failing (send nothing; the job runs again). A
 * rate-limited or paused delivery has no `wakeOn`: its time is its place in the line for its
 * webhook's tokens, or the end of the pause.
 */
export type NotAdmitted =
  | {
      kind: 'deferred';
      wakeOn: string | undefined;
      retryAtMs: number;
      reason: DeferReason;
      /** Of a high-priority webhook: woken before the normal deliveries deferred behind the same endpoint. */
      high?: true;
    }
  | { kind: 'circuit_open' }
  | { kind: 'storage' };

/** What held the delivery back, as admission found it. */
export type HoldBack =
  /** The endpoint's circuit is open, or its probe is in flight; the breaker said when to look again. */
  | { by: 'circuit'; reason: 'open' | 'probing'; retryAtMs: number }
  /** The endpoint has not proven itself (a first contact in flight, or slow lately). */
  | { by: 'unproven'; retryAtMs: number }
  /** The suspect share of the send slots is taken. */
  | { by: 'suspect_share' }
  /** The endpoint asked for a pause (Retry-After) until then. */
  | { by: 'paused'; untilMs: number }
  /** The endpoint is at its concurrency limit. */
  | { by: 'concurrency' }
  /** The webhook's send window is full: its place in the line is this far ahead. */
  | { by: 'rate'; retryInMs: number };

/** The delivery's side of it. */
export interface DeferralCase {
  /** The endpoint's key. */
  endpoint: string;
  /** When the retry schedule made this attempt due. */
  dueAtMs: number;
  /** Spreads a herd held back behind one endpoint over this much past its time (0: not spread). */
  deferJitterMs: number;
}

/** The worker's side of it. */
export interface DeferralRules {
  /** How far past its due time an open circuit may hold a delivery back; beyond, the attempt is recorded as `circuit_open`. */
  circuitHoldMs: number;
  /** How long a delivery held back behind an unproven endpoint is deferred when the wakeups bring it back. */
  unprovenHoldMs: number;
}

/**
 * When a delivery deferred for its endpoint's concurrency limit looks again at the latest (plus up to
 * as much at random): the wakeups bring it back sooner, as soon as the endpoint has room.
 */
const CONCURRENCY_RETRY_MS = 1_000;

const CIRCUIT_OPEN: NotAdmitted = { kind: 'circuit_open' };

/**
 * Where a held-back delivery goes. Behind an open circuit: back when it ends, unless that is more
 * than one open period past the attempt's due time (then the attempt is recorded as `circuit_open`,
 * so a circuit never stretches a delivery's life past its schedule). Behind an unproven endpoint or
 * a full suspect share: for the unproven hold, since the wakeups bring it back (they send the
 * endpoint one contact at a time and the rest the moment one is answered in time). Behind a pause:
 * its end; a concurrency limit: at most 1 to 2 s (woken as attempts end); a rate limit: its place
 * in the line. Pauses and limits are spread by at least 1 s, so a herd does not come back at once.
 */
export function planDeferral(
  hold: HoldBack,
  delivery: DeferralCase,
  rules: DeferralRules,
  nowMs: number,
  random: () => number,
): NotAdmitted {
  const { endpoint, deferJitterMs } = delivery;
  switch (hold.by) {
    case 'circuit':
      if (hold.retryAtMs > delivery.dueAtMs + rules.circuitHoldMs) return CIRCUIT_OPEN;
      return deferred(endpoint, Math.round(hold.retryAtMs + random() * deferJitterMs), hold.reason);
    case 'unproven': {
      const heldUntilMs = Math.max(hold.retryAtMs, nowMs + rules.unprovenHoldMs);
      return deferred(endpoint, Math.round(heldUntilMs + random() * deferJitterMs), 'slow');
    }
    case 'suspect_share':
      return deferred(
        endpoint,
        Math.round(nowMs + rules.unprovenHoldMs + random() * Math.max(1_000, deferJitterMs)),
        'slow',
      );
    case 'paused':
      return deferred(undefined, Math.round(hold.untilMs + random() * Math.max(1_000, deferJitterMs)), 'paused');
    case 'concurrency':
      return deferred(
        endpoint,
        Math.round(nowMs + CONCURRENCY_RETRY_MS + random() * Math.max(1_000, deferJitterMs)),
        'concurrency',
      );
    case 'rate':
      return deferred(undefined, nowMs + hold.retryInMs, 'rate_limited');
  }
}

function deferred(wakeOn: string | undefined, retryAtMs: number, reason: DeferReason): NotAdmitted {
  return { kind: 'deferred', wakeOn, retryAtMs, reason };
}
