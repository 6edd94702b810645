import { ConcurrencyLimits, PAUSE_MS_MAX, type FlowAdmission, type FlowView } from '../domain/concurrency-limit.js';
import type { WorkerFlow } from '../store/endpoint-flow.js';
import type { Interpretation } from './interpret.js';

/** What the flow control needs to share with other workers (see store/endpoint-flow.ts). */
export interface SharedPauses {
  pause(endpoint: string, untilMs: number, nowMs: number): Promise<void>;
  pausedUntil(endpoint: string): Promise<number | undefined>;
  report(workerId: string, flows: ReadonlyMap<string, WorkerFlow>): Promise<void>;
}

/** What happened to an endpoint's flow, for metrics: a limit halved, or a Retry-After paused it. */
export type FlowEvent = { kind: 'decreased'; limit: number } | { kind: 'paused'; forMs: number };

/** Pause lookups remembered per process at most. */
const KNOWN_ENDPOINTS_MAX = 10_000;
/** Changed limits written for the stats endpoint at most this often. */
const REPORT_EVERY_MS = 1_000;

/**
 * One worker's flow control of receiver endpoints: an AIMD concurrency limit per endpoint (its own,
 * see domain/concurrency-limit.ts) and the pauses receivers ask for with Retry-After, shared with
 * every worker. A pause is written to Redis and published by the worker that got it; the others
 * hear it at once (`heard`), and a worker meeting an endpoint for the first time reads it (`learn`),
 * so no attempt pays a round trip for it.
 */
export class EndpointFlow {
  private readonly limits = new ConcurrencyLimits();
  private readonly lookups = new Map<string, Promise<void>>();
  private readonly changed = new Set<string>();
  /** Deliveries waiting in the process for room at an endpoint, first come first woken. */
  private readonly roomWaits = new Map<string, { resolve: () => void; live: boolean; timer: NodeJS.Timeout | undefined }[]>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly shared: SharedPauses | undefined,
    private readonly workerId: string,
    private readonly nowMs: () => number,
    private readonly onEvent: (event: FlowEvent) => void = () => undefined,
  ) {}

  /** Learns, once per endpoint and process, whether another worker paused it. */
  learn(endpoint: string): Promise<void> | undefined {
    const shared = this.shared;
    if (shared === undefined) return undefined;
    let lookup = this.lookups.get(endpoint);
    if (lookup === undefined) {
      if (this.lookups.size >= KNOWN_ENDPOINTS_MAX) this.lookups.clear();
      lookup = shared.pausedUntil(endpoint).then(
        (untilMs) => void (untilMs === undefined ? undefined : this.limits.pause(endpoint, untilMs, this.nowMs())),
        // Unknown for now (storage failing): asked again at the next delivery.
        () => void this.lookups.delete(endpoint),
      );
      this.lookups.set(endpoint, lookup);
    }
    return lookup;
  }

  /** Another worker paused `endpoint`. */
  heard(endpoint: string, untilMs: number): void {
    this.limits.pause(endpoint, untilMs, this.nowMs());
  }

  /** Starts an attempt within the endpoint's limit and `ceiling`, unless it is paused or full. */
  tryStart(endpoint: string, ceiling: number): FlowAdmission {
    return this.limits.tryStart(endpoint, ceiling, this.nowMs());
  }

  /** Takes back a started attempt that was not sent. */
  cancel(endpoint: string, ticket: number): void {
    this.limits.cancel(endpoint, ticket);
    this.freed(endpoint);
  }

  /**
   * Waits, at most `timeoutMs` (Infinity: as long as it takes), for room at `endpoint`: each attempt that ends (or is taken back)
   * wakes one waiter, the longest waiting, not all of them (thousands may wait behind one endpoint,
   * and all but one would find it full again).
   */
  waitForRoom(endpoint: string, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let queue = this.roomWaits.get(endpoint);
      if (queue === undefined) {
        queue = [];
        this.roomWaits.set(endpoint, queue);
      }
      const waiter = { resolve, live: true, timer: undefined as NodeJS.Timeout | undefined };
      queue.push(waiter);
      if (Number.isFinite(timeoutMs))
        waiter.timer = setTimeout(() => {
          // Gone by itself: a wakeup must not be spent on it.
          waiter.live = false;
          resolve();
        }, timeoutMs);
    });
  }

  /** The endpoint's limit (Infinity before its first attempt). */
  limitOf(endpoint: string): number {
    return this.limits.view(endpoint, this.nowMs())?.limit || Infinity;
  }

  /** How many more attempts the endpoint takes now (the wakeups bring back that many deferred ones). */
  room(endpoint: string): number {
    return this.limits.room(endpoint, this.nowMs());
  }

  view(endpoint: string): FlowView | undefined {
    return this.limits.view(endpoint, this.nowMs());
  }

  /**
   * Ends an attempt: adapts the limit to the answer's flow signal, and when the answer asks for a
   * wait (a Retry-After) pauses the endpoint for every worker (at most PAUSE_MS_MAX).
   */
  end(endpoint: string, ticket: number, answer: Pick<Interpretation, 'flow' | 'retryAfterMs'>, ceiling: number): void {
    const nowMs = this.nowMs();
    const change = this.limits.end(endpoint, ticket, answer.flow, ceiling);
    if (change.decreased) this.onEvent({ kind: 'decreased', limit: change.limit });
    this.markChanged(endpoint);
    // One ended; one more may fit too when the limit grew.
    this.freed(endpoint, Math.max(1, Math.min(this.limits.room(endpoint, nowMs), 2)));
    const askedMs = answer.retryAfterMs;
    if (askedMs === undefined || askedMs <= 0) return;
    const untilMs = this.limits.pause(endpoint, nowMs + Math.min(askedMs, PAUSE_MS_MAX), nowMs);
    this.onEvent({ kind: 'paused', forMs: untilMs - nowMs });
    // Lost when storage fails: then only this worker holds the endpoint back.
    this.shared?.pause(endpoint, untilMs, nowMs).catch(() => undefined);
  }

  /** Writes the changed limits once a second (for the stats endpoint) until stop(). */
  start(): void {
    this.timer ??= setInterval(() => void this.report(), REPORT_EVERY_MS).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Wakes up to `count` deliveries waiting for room at `endpoint`, the longest waiting first. */
  private freed(endpoint: string, count = 1): void {
    const queue = this.roomWaits.get(endpoint);
    if (queue === undefined) return;
    let woken = 0;
    while (woken < count && queue.length > 0) {
      const waiter = queue.shift()!;
      if (!waiter.live) continue;
      waiter.live = false;
      clearTimeout(waiter.timer);
      waiter.resolve();
      woken += 1;
    }
    if (queue.length === 0) this.roomWaits.delete(endpoint);
  }

  private markChanged(endpoint: string): void {
    if (this.changed.size < KNOWN_ENDPOINTS_MAX) this.changed.add(endpoint);
  }

  private async report(): Promise<void> {
    if (this.shared === undefined || this.changed.size === 0) return;
    const flows = new Map<string, WorkerFlow>();
    for (const endpoint of this.changed) {
      const view = this.view(endpoint);
      if (view !== undefined && view.limit > 0) flows.set(endpoint, { limit: view.limit, inflight: view.inflight });
    }
    this.changed.clear();
    // Only the stats endpoint reads these: a lost write shows an older limit for a second.
    await this.shared.report(this.workerId, flows).catch(() => undefined);
  }
}
