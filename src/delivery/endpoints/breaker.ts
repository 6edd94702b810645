import type { AttemptHealth } from '../interpret.js';

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
  | { state: 'open'; reason: OpenReason; openForMs: number; webhookIds: string[] }
  | { state: 'half_open' | 'closed'; webhookIds: string[] };

/** What every endpoint's circuit shares: the tuning, and who hears of its changes. */
export interface BreakerRules {
  options: BreakerOptions;
  onStateChange: (endpoint: string, change: CircuitChange) => void;
}

interface WindowBucket {
  startMs: number;
  total: number;
  failed: number;
}

// Admissions that carry nothing of their own: the same object every time, so admitting allocates nothing.
const HEALTHY: Admission = { admitted: true, probe: false, lane: 'healthy' };
const SUSPECT: Admission = { admitted: true, probe: false, lane: 'suspect' };
const PROBE: Admission = { admitted: true, probe: true, lane: 'suspect' };

const WINDOW_BUCKETS = 10;
/** Webhook ids remembered per endpoint for log lines. */
const WEBHOOK_IDS_MAX = 10;
/** Failures counted toward a run at most; more change nothing (the circuit is open by then). */
const FAILED_RUN_MAX = 1_000;

/**
 * One endpoint's circuit breaker, its isolation inside one worker process (an endpoint is one
 * vendor's origin, see domain/endpoint.ts: another vendor's failures on the same origin never count
 * here; the registry, registry.ts, keeps one per endpoint).
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
 */
export class Circuit {
  /** Has ever answered with an HTTP response (of any status), here or (as learnt) in another worker. */
  private hasAnswered = false;
  /** Failed attempts that started after the last attempt that got a healthy answer: ticket → timed out. */
  private readonly failedSinceHealthy = new Map<number, boolean>();
  /** The latest-started attempt that got a healthy answer (-1: none yet). */
  private lastHealthyTicket = -1;
  /** When the last healthy answer came (-Infinity: none yet). */
  private lastHealthyAtMs = -Infinity;
  /** Finished attempts by time, `WINDOW_BUCKETS` buckets over `windowMs`. */
  private window: WindowBucket[] = [];
  /** Suspect until then: a slow or timed-out attempt happened lately. */
  private suspectUntilMs = 0;
  /** Set while open (or half-open once it has passed). */
  private openUntilMs: number | undefined = undefined;
  private openMs: number;
  private probeInFlight = false;
  /** Start times of attempts in flight, by ticket. */
  private readonly inflight = new Map<number, number>();
  /** Resolved (and replaced) whenever an attempt to the endpoint ends. */
  private settle: { promise: Promise<void>; resolve: () => void } | undefined = undefined;
  /** Webhooks that sent to this endpoint lately (most recent last), for the circuit's log lines. */
  private readonly webhookIds: string[] = [];
  private nextTicket = 0;

  constructor(
    /** The endpoint's key, for the state changes' listener. */
    private readonly endpoint: string,
    private readonly rules: BreakerRules,
  ) {
    this.openMs = rules.options.openMs;
  }

  /**
   * May an attempt start now? Admission is only held by calling start() right away. `forceProbe` (a
   * replay or test event a vendor asked for): an open circuit with no probe in flight is probed now
   * instead of at the end of its open period.
   */
  admit(nowMs: number, forceProbe = false): Admission {
    const { options } = this.rules;
    if (this.openUntilMs !== undefined) {
      if (this.probeInFlight)
        return {
          admitted: false,
          retryAtMs: nowMs + Math.min(this.openMs, options.slowAfterMs * 2),
          reason: 'probing',
        };
      if (nowMs < this.openUntilMs && !forceProbe)
        return { admitted: false, retryAtMs: this.openUntilMs, reason: 'open' };
      return PROBE;
    }
    if (!this.hasAnswered) {
      if (this.inflight.size === 0) return SUSPECT;
      return {
        admitted: false,
        reason: 'first_contact',
        settled: this.settled(),
        retryAtMs: this.afterInflight(nowMs),
        contactStartedMs: Math.min(...this.inflight.values()),
      };
    }
    let slow = 0;
    for (const startedMs of this.inflight.values()) if (nowMs - startedMs >= options.slowAfterMs) slow += 1;
    const suspect = slow > 0 || nowMs < this.suspectUntilMs;
    if (!suspect) return HEALTHY;
    if (this.inflight.size >= options.slowInflightMax)
      return { admitted: false, retryAtMs: this.afterInflight(nowMs), reason: 'slow' };
    return SUSPECT;
  }

  /** Marks an admitted attempt as started (call right after admit()); pass the ticket to finish(). */
  start(nowMs: number, probe = false, webhookId?: string): number {
    if (webhookId !== undefined) this.rememberWebhook(webhookId);
    if (probe && !this.probeInFlight) {
      this.probeInFlight = true;
      this.rules.onStateChange(this.endpoint, { state: 'half_open', webhookIds: [...this.webhookIds] });
    }
    const ticket = this.nextTicket++;
    this.inflight.set(ticket, nowMs);
    return ticket;
  }

  /**
   * Takes back a started attempt that was not sent (its webhook's rate limit held it back): it counts
   * for nothing, and deliveries waiting on the endpoint look again. A probe taken back leaves the
   * circuit open with its period over, so the next delivery probes.
   */
  cancel(ticket: number): void {
    if (!this.inflight.delete(ticket)) return;
    if (this.openUntilMs !== undefined) this.probeInFlight = false;
    this.wakeWaiters();
  }

  /** Records how an attempt ended, its health as interpret.ts reads the answer. */
  finish(ticket: number, health: AttemptHealth, nowMs: number): void {
    const { options } = this.rules;
    const startedMs = this.inflight.get(ticket) ?? nowMs;
    this.inflight.delete(ticket);
    const wasProbe = this.openUntilMs !== undefined && this.probeInFlight;
    if (health !== 'timeout') this.hasAnswered = true;
    if (nowMs - startedMs >= options.slowAfterMs || health === 'timeout') this.suspectUntilMs = nowMs + options.openMs;
    this.count(nowMs, health !== 'healthy');
    if (health === 'healthy') {
      const wasOpen = this.openUntilMs !== undefined;
      this.lastHealthyAtMs = nowMs;
      if (ticket > this.lastHealthyTicket) {
        this.lastHealthyTicket = ticket;
        for (const failed of this.failedSinceHealthy.keys())
          if (failed < ticket) this.failedSinceHealthy.delete(failed);
      }
      if (nowMs - startedMs < options.slowAfterMs) this.suspectUntilMs = 0;
      if (wasOpen) {
        this.openUntilMs = undefined;
        this.openMs = options.openMs;
        this.probeInFlight = false;
        // A fresh start: the failures that opened it are history once a probe got through.
        this.failedSinceHealthy.clear();
        this.window = [];
        this.rules.onStateChange(this.endpoint, { state: 'closed', webhookIds: [...this.webhookIds] });
      }
    } else {
      if (ticket > this.lastHealthyTicket && this.failedSinceHealthy.size < FAILED_RUN_MAX)
        this.failedSinceHealthy.set(ticket, health === 'timeout');
      if (wasProbe) {
        this.probeInFlight = false;
        this.openMs = Math.min(this.openMs * 2, options.openMsMax);
        this.open(nowMs, 'probe_failed');
      } else if (this.openUntilMs === undefined) {
        const reason = this.openReason(nowMs);
        if (reason !== undefined) this.open(nowMs, reason);
      }
    }
    this.wakeWaiters();
  }

  /**
   * Marks the endpoint as one that has answered before (another worker saw it answer), so its first
   * attempt here is not a first contact that the rest of a burst must wait behind.
   */
  markAnswered(): void {
    this.hasAnswered = true;
  }

  /** Whether the endpoint has answered, here or as learnt through markAnswered(). */
  get answered(): boolean {
    return this.hasAnswered;
  }

  /** Whether an attempt to the endpoint is in flight in this process. */
  hasInflight(): boolean {
    return this.inflight.size > 0;
  }

  /** Resolves when the next attempt to the endpoint ends (at once when nothing is in flight). */
  settled(): Promise<void> {
    if (this.inflight.size === 0) return Promise.resolve();
    if (!this.settle) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.settle = { promise, resolve };
    }
    return this.settle.promise;
  }

  /** Whether the circuit is open now (not yet due for its probe). */
  isOpen(nowMs: number): boolean {
    return this.openUntilMs !== undefined && nowMs < this.openUntilMs;
  }

  /** Nothing in flight and the circuit closed: forgetting it loses only what it learnt of a healthy endpoint. */
  get idle(): boolean {
    return this.inflight.size === 0 && this.openUntilMs === undefined;
  }

  /** The rule that opens the circuit after this failure, if one does. */
  private openReason(nowMs: number): OpenReason | undefined {
    const { options } = this.rules;
    const { total, failed } = this.windowCounts(nowMs);
    if (total >= options.minAttempts && failed >= total * options.failureRate) return 'failure_rate';
    // Runs in a row open only an endpoint with no healthy answer lately: a mostly healthy endpoint
    // has runs of bad luck, an endpoint that is down has nothing else.
    if (nowMs - this.lastHealthyAtMs < options.windowMs) return undefined;
    if (this.failedSinceHealthy.size >= options.failureThreshold) return 'consecutive_failures';
    let timeouts = 0;
    for (const timedOut of this.failedSinceHealthy.values()) if (timedOut) timeouts += 1;
    return timeouts >= options.timeoutThreshold ? 'consecutive_timeouts' : undefined;
  }

  private open(nowMs: number, reason: OpenReason): void {
    this.openUntilMs = nowMs + this.openMs;
    this.rules.onStateChange(this.endpoint, {
      state: 'open',
      reason,
      openForMs: this.openMs,
      webhookIds: [...this.webhookIds],
    });
  }

  /** Counts a finished attempt into the window's bucket of `nowMs`. */
  private count(nowMs: number, failed: boolean): void {
    const { windowMs } = this.rules.options;
    const bucketMs = windowMs / WINDOW_BUCKETS;
    const startMs = nowMs - (nowMs % bucketMs);
    let bucket = this.window.at(-1);
    if (bucket === undefined || bucket.startMs !== startMs) {
      bucket = { startMs, total: 0, failed: 0 };
      this.window.push(bucket);
      while (this.window.length > WINDOW_BUCKETS || (this.window[0] && this.window[0].startMs <= nowMs - windowMs))
        this.window.shift();
    }
    bucket.total += 1;
    if (failed) bucket.failed += 1;
  }

  private windowCounts(nowMs: number): { total: number; failed: number } {
    const { windowMs } = this.rules.options;
    let total = 0;
    let failed = 0;
    for (const bucket of this.window) {
      if (bucket.startMs <= nowMs - windowMs) continue;
      total += bucket.total;
      failed += bucket.failed;
    }
    return { total, failed };
  }

  /** When the oldest attempt in flight will have ended at the latest (answered or timed out). */
  private afterInflight(nowMs: number): number {
    let oldestMs = nowMs;
    for (const startedMs of this.inflight.values()) oldestMs = Math.min(oldestMs, startedMs);
    return Math.max(nowMs + 250, oldestMs + this.rules.options.attemptTimeoutMs + 100);
  }

  /** An attempt ended or was taken back: deliveries waiting on the endpoint look again. */
  private wakeWaiters(): void {
    const settle = this.settle;
    this.settle = undefined;
    settle?.resolve();
  }

  private rememberWebhook(webhookId: string): void {
    const ids = this.webhookIds;
    if (ids.at(-1) === webhookId) return;
    const at = ids.indexOf(webhookId);
    if (at !== -1) ids.splice(at, 1);
    ids.push(webhookId);
    if (ids.length > WEBHOOK_IDS_MAX) ids.shift();
  }
}
