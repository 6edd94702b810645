import { PAUSE_MS_MAX, type FlowAdmission, type FlowView } from '../../domain/concurrency-limit.js';
import { enterAhead } from '../../lib/priority-line.js';
import type { WorkerFlow } from '../../store/endpoint-flow.js';
import type { Interpretation } from '../interpret.js';
import type { Endpoint, EndpointRegistry, RoomWaiter } from './registry.js';

/** What the flow control needs to share with other workers (see store/endpoint-flow.ts). */
export interface SharedPauses {
  pause(endpoint: string, untilMs: number, nowMs: number): Promise<void>;
  pausedUntil(endpoint: string): Promise<number | undefined>;
  report(workerId: string, flows: ReadonlyMap<string, WorkerFlow>): Promise<void>;
}

/** What happened to an endpoint's flow, for metrics: a limit halved, or a Retry-After paused it. */
export type FlowEvent = { kind: 'decreased'; limit: number } | { kind: 'paused'; forMs: number };

/** Refused for the host's limit: as the endpoint's own FULL, nothing allocated. */
const HOST_FULL: FlowAdmission = { started: false, reason: 'full' };

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
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly endpoints: Pick<EndpointRegistry, 'ensure' | 'get' | 'values'>,
    private readonly shared: SharedPauses | undefined,
    private readonly workerId: string,
    private readonly nowMs: () => number,
    private readonly onEvent: (event: FlowEvent) => void = () => undefined,
    /** Where a host's limit starts, and grows back to (the worker's send slots; see host.ts). */
    private readonly hostCeiling = 1_000,
  ) {}

  /** Learns, once per endpoint and process, whether another worker paused the endpoint of `key`. */
  learn(key: string): Promise<void> | undefined {
    return this.learnOf(this.endpoints.ensure(key));
  }

  /** As learn(): undefined when there is nothing to ask (any more). */
  learnOf(endpoint: Endpoint): Promise<void> | undefined {
    const shared = this.shared;
    if (shared === undefined || endpoint.pauseLookup === true) return undefined;
    endpoint.pauseLookup ??= shared.pausedUntil(endpoint.key).then(
      (untilMs) => {
        endpoint.pauseLookup = true;
        if (untilMs !== undefined) endpoint.limit.pause(untilMs, this.nowMs());
      },
      // Unknown for now (storage failing): asked again at the next delivery.
      () => void (endpoint.pauseLookup = undefined),
    );
    return endpoint.pauseLookup;
  }

  /** Another worker paused the endpoint of `key`. */
  heard(key: string, untilMs: number): void {
    this.endpoints.ensure(key).limit.pause(untilMs, this.nowMs());
  }

  /**
   * Starts an attempt within the endpoint's limit and `ceiling` and within its host's limit, unless
   * the endpoint is paused or either is full (the ticket is the endpoint's).
   */
  tryStart(endpoint: Endpoint, ceiling: number): FlowAdmission {
    const nowMs = this.nowMs();
    const started = endpoint.limit.tryStart(ceiling, nowMs);
    if (!started.started) return started;
    const { host } = endpoint;
    const atHost = host.limit.tryStart(this.hostCeiling, nowMs);
    if (atHost.started) {
      endpoint.hostTickets.set(started.ticket, atHost.ticket);
      return started;
    }
    // A host whose limit never came down holds nothing back that the slots would not (deliveries
    // waiting for a slot count at its limit too): the attempt goes on, untracked there.
    if (host.limit.current >= this.hostCeiling) return started;
    endpoint.limit.cancel(started.ticket);
    // Woken as the host's attempts end, whichever vendor's they are.
    host.waiting.add(endpoint);
    return HOST_FULL;
  }

  /**
   * Once the attempt of `ticket` holds a send slot: an attempt that went on untracked at its host
   * (tryStart) takes its place there now if the host has come down meanwhile; false when the host is
   * full (take the attempt back and admit it again: it waits for the host, woken as the host's
   * attempts end).
   */
  holdAtHost(endpoint: Endpoint, ticket: number): boolean {
    const { host } = endpoint;
    if (host.limit.current >= this.hostCeiling || endpoint.hostTickets.has(ticket)) return true;
    const atHost = host.limit.tryStart(this.hostCeiling, this.nowMs());
    if (!atHost.started) {
      host.waiting.add(endpoint);
      return false;
    }
    endpoint.hostTickets.set(ticket, atHost.ticket);
    return true;
  }

  /** Takes back a started attempt that was not sent. */
  cancel(endpoint: Endpoint, ticket: number): void {
    endpoint.limit.cancel(ticket);
    const hostTicket = endpoint.hostTickets.get(ticket);
    if (hostTicket !== undefined) {
      endpoint.hostTickets.delete(ticket);
      endpoint.host.limit.cancel(hostTicket);
      this.freedAtHost(endpoint);
    }
    this.freed(endpoint);
  }

  /**
   * Waits, at most `timeoutMs`, for room at `endpoint`: each attempt that ends (or is taken back)
   * wakes one waiter, the longest waiting, not all of them (thousands may wait behind one endpoint,
   * and all but one would find it full again). A `high`-priority waiter is in line ahead of every
   * normal one (behind the high ones already waiting).
   */
  waitForRoom(endpoint: Endpoint, timeoutMs: number, high = false): Promise<void> {
    return new Promise<void>((resolve) => {
      const waiter: RoomWaiter = { resolve, live: true, timer: undefined, high };
      const queue = (endpoint.roomWaiters ??= []);
      if (high) {
        enterAhead(queue, waiter, (waiting) => waiting.live && !waiting.high);
        endpoint.highWaiting += 1;
      } else queue.push(waiter);
      endpoint.roomWaiting += 1;
      waiter.timer = setTimeout(() => {
        // Gone by itself: a wakeup must not be spent on it.
        waiter.live = false;
        this.gone(endpoint, waiter);
        resolve();
      }, timeoutMs);
    });
  }

  /** The smaller of the endpoint's limit and its host's (Infinity before their first attempt). */
  limitOf(endpoint: Endpoint): number {
    const nowMs = this.nowMs();
    return Math.min(endpoint.limit.view(nowMs).limit || Infinity, endpoint.host.limit.view(nowMs).limit || Infinity);
  }

  /** How many more attempts the endpoint takes now, its host allowing (the wakeups bring back that many deferred ones). */
  room(endpoint: Endpoint): number {
    const nowMs = this.nowMs();
    return Math.min(endpoint.limit.room(nowMs), endpoint.host.limit.room(nowMs));
  }

  /** The limit, attempts in flight and pause of the endpoint of `key` (undefined: never met). */
  view(key: string): FlowView | undefined {
    return this.endpoints.get(key)?.limit.view(this.nowMs());
  }

  /**
   * Ends an attempt: adapts the limit to the answer's flow signal, and when the answer asks for a
   * wait (a Retry-After) pauses the endpoint for every worker (at most PAUSE_MS_MAX).
   */
  end(
    endpoint: Endpoint,
    ticket: number,
    answer: Pick<Interpretation, 'flow' | 'retryAfterMs'>,
    ceiling: number,
  ): void {
    const nowMs = this.nowMs();
    const change = endpoint.limit.end(ticket, answer.flow, ceiling);
    if (change.decreased) this.onEvent({ kind: 'decreased', limit: change.limit });
    endpoint.flowChanged = true;
    const { host } = endpoint;
    const hostSignal = host.corroborate(endpoint.key, answer.flow, nowMs);
    const hostTicket = endpoint.hostTickets.get(ticket);
    if (hostTicket !== undefined) {
      endpoint.hostTickets.delete(ticket);
      host.limit.end(hostTicket, hostSignal, this.hostCeiling);
      this.freedAtHost(endpoint);
    } else if (hostSignal === 'congested' && host.limit.current >= this.hostCeiling) {
      // Untracked at a host that never came down: its first push-back brings it down all the same.
      host.limit.pushBack(this.hostCeiling);
    }
    // One ended; one more may fit too when the limit grew.
    this.freed(endpoint, Math.max(1, Math.min(endpoint.limit.room(nowMs), 2)));
    const askedMs = answer.retryAfterMs;
    if (askedMs === undefined || askedMs <= 0) return;
    const untilMs = endpoint.limit.pause(nowMs + Math.min(askedMs, PAUSE_MS_MAX), nowMs);
    this.onEvent({ kind: 'paused', forMs: untilMs - nowMs });
    // Lost when storage fails: then only this worker holds the endpoint back.
    this.shared?.pause(endpoint.key, untilMs, nowMs).catch(() => undefined);
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
  private freed(endpoint: Endpoint, count = 1): void {
    const queue = endpoint.roomWaiters;
    if (queue === undefined) return;
    let woken = 0;
    while (woken < count && queue.length > 0) {
      const waiter = queue.shift()!;
      if (!waiter.live) continue;
      waiter.live = false;
      clearTimeout(waiter.timer);
      this.gone(endpoint, waiter);
      waiter.resolve();
      woken += 1;
    }
  }

  /**
   * An attempt at the endpoint's host ended: wakes one delivery of another endpoint that waits
   * because the host was full (its own endpoint's waiters are woken by freed()).
   */
  private freedAtHost(ended: Endpoint): void {
    const { waiting } = ended.host;
    if (waiting.size === 0) return;
    const nowMs = this.nowMs();
    for (const endpoint of waiting) {
      waiting.delete(endpoint);
      if (endpoint === ended || endpoint.roomWaiting === 0) continue;
      if (endpoint.limit.room(nowMs) > 0) {
        this.freed(endpoint);
        // Still waiting there: in line again, behind the others.
        if (endpoint.roomWaiting > 0) waiting.add(endpoint);
        return;
      }
    }
  }

  /** A waiter left (woken, or gone by itself); with none left, the queue of those that left goes too. */
  private gone(endpoint: Endpoint, waiter: RoomWaiter): void {
    if (waiter.high) endpoint.highWaiting -= 1;
    endpoint.roomWaiting -= 1;
    if (endpoint.roomWaiting === 0) endpoint.roomWaiters = undefined;
  }

  private async report(): Promise<void> {
    if (this.shared === undefined) return;
    const nowMs = this.nowMs();
    const flows = new Map<string, WorkerFlow>();
    for (const endpoint of this.endpoints.values()) {
      if (!endpoint.flowChanged) continue;
      endpoint.flowChanged = false;
      const view = endpoint.limit.view(nowMs);
      if (view.limit > 0) flows.set(endpoint.key, { limit: view.limit, inflight: view.inflight });
    }
    if (flows.size === 0) return;
    // Only the stats endpoint reads these: a lost write shows an older limit for a second.
    await this.shared.report(this.workerId, flows).catch(() => undefined);
  }
}
