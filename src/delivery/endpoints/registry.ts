import { ConcurrencyLimit } from '../../domain/concurrency-limit.js';
import { endpointKey, endpointParts } from '../../domain/endpoint.js';
import type { Webhook } from '../../domain/webhook.js';
import { Circuit, type BreakerRules } from './breaker.js';
import { HostCeiling } from './host.js';
import type { DeferredDeliveries } from './wakeups.js';

/**
 * Every receiver endpoint this process knows (an endpoint is one vendor's callback URL origin, see
 * domain/endpoint.ts), each one object holding all that is kept per endpoint: its circuit breaker
 * (breaker.ts), its adaptive concurrency limit and Retry-After pause (domain/concurrency-limit.ts,
 * flow.ts), whether other workers were asked if it answered (admission.ts), the deliveries waiting
 * in the process for room at it, and those deferred behind it that the wakeups bring back
 * (wakeups.ts).
 *
 * Why one registry: kept in a map per concern, each with its own bound, an endpoint could be
 * forgotten by one part while another still held it: a full flow map dropped an endpoint in the
 * middle of a Retry-After pause, and the pause was over for this worker at once. Here one bound
 * counts endpoints, and only an endpoint with nothing to remember beyond what it learnt of a
 * healthy receiver (nothing in flight, circuit closed, no pause, nobody waiting) is forgotten.
 */

/** Endpoints remembered per process; past it, idle ones are forgotten (they start over when met again). */
export const ENDPOINTS_MAX = 10_000;

/** A delivery waiting in the process for room at its endpoint's concurrency limit. */
export interface RoomWaiter {
  resolve: () => void;
  /** False once woken or gone by itself. */
  live: boolean;
  timer: NodeJS.Timeout | undefined;
  /** Of a high-priority webhook: in line ahead of every normal waiter. */
  high: boolean;
}

/** One endpoint as this process knows it. */
export class Endpoint {
  readonly circuit: Circuit;
  readonly limit = new ConcurrencyLimit();
  /** Other workers asked whether it answered lately: the question while it is out, true once answered. */
  memoryLookup: Promise<void> | true | undefined = undefined;
  /** Other workers know it answered (this process told them, or learnt it from them). */
  memoryShared = false;
  /** Other workers' Retry-After pause of it read: the read while it is out, true once done. */
  pauseLookup: Promise<void> | true | undefined = undefined;
  /** Its limit changed since the last report (store/endpoint-flow.ts, for the stats endpoint). */
  flowChanged = false;
  /** Deliveries waiting in the process for room at its limit, first come first woken (and some that left). */
  roomWaiters: RoomWaiter[] | undefined = undefined;
  /** How many of them still wait. */
  roomWaiting = 0;
  /** How many of those are of high-priority webhooks (a normal delivery does not take room before them). */
  highWaiting = 0;
  /** Deliveries deferred behind it, for the wakeups to bring back. */
  deferred: DeferredDeliveries | undefined = undefined;
  /** Forgotten by the registry: whoever still holds it looks it up again. */
  evicted = false;
  /** Each attempt in flight's ticket of the host's limit, by its ticket of this endpoint's. */
  readonly hostTickets = new Map<number, number>();

  constructor(
    readonly key: string,
    rules: BreakerRules,
    /** The receiver host it shares with other vendors' endpoints (see host.ts). */
    readonly host: HostCeiling<Endpoint> = new HostCeiling(endpointParts(key).origin),
  ) {
    this.circuit = new Circuit(key, rules);
  }

  /** Nothing in flight or waiting, circuit closed, no pause: nothing lost by forgetting it. */
  idle(nowMs: number): boolean {
    return this.circuit.idle && this.limit.idle(nowMs) && this.roomWaiting === 0 && this.deferred === undefined;
  }
}

/** The endpoints of one process, at most `max` (ENDPOINTS_MAX) of them. */
export class EndpointRegistry {
  private readonly endpoints = new Map<string, Endpoint>();
  /** The hosts of the endpoints held, by origin; a host goes with the last endpoint on it. */
  private readonly hosts = new Map<string, HostCeiling<Endpoint>>();
  /** Each webhook copy's endpoint, so the key (a URL parse) is built once per copy, not per delivery. */
  private readonly ofWebhooks = new WeakMap<Webhook, Endpoint>();

  constructor(
    private readonly rules: BreakerRules,
    private readonly nowMs: () => number,
    private readonly max = ENDPOINTS_MAX,
  ) {}

  /** The endpoint of `key`, if this process knows it. */
  get(key: string): Endpoint | undefined {
    return this.endpoints.get(key);
  }

  /** The endpoint of `key`, met now for the first time if need be. */
  ensure(key: string): Endpoint {
    let endpoint = this.endpoints.get(key);
    if (endpoint === undefined) {
      if (this.endpoints.size >= this.max) this.evictIdle();
      const { origin } = endpointParts(key);
      let host = this.hosts.get(origin);
      if (host === undefined) {
        host = new HostCeiling<Endpoint>(origin);
        this.hosts.set(origin, host);
      }
      host.endpoints += 1;
      endpoint = new Endpoint(key, this.rules, host);
      this.endpoints.set(key, endpoint);
    }
    return endpoint;
  }

  /** The endpoint a webhook's deliveries go to. */
  ofWebhook(webhook: Webhook): Endpoint {
    let endpoint = this.ofWebhooks.get(webhook);
    if (endpoint === undefined || endpoint.evicted) {
      endpoint = this.ensure(endpointKey(webhook.vendorId, webhook.callbackUrl));
      this.ofWebhooks.set(webhook, endpoint);
    }
    return endpoint;
  }

  /** How many receiver hosts the endpoints held are on (tests). */
  hostCount(): number {
    return this.hosts.size;
  }

  values(): IterableIterator<Endpoint> {
    return this.endpoints.values();
  }

  /** Keys of the endpoints whose circuit is open now (for metrics and tests). */
  openEndpoints(nowMs: number): string[] {
    const open: string[] = [];
    for (const endpoint of this.endpoints.values()) if (endpoint.circuit.isOpen(nowMs)) open.push(endpoint.key);
    return open;
  }

  private evictIdle(): void {
    const nowMs = this.nowMs();
    for (const [key, endpoint] of this.endpoints) {
      if (!endpoint.idle(nowMs)) continue;
      endpoint.evicted = true;
      this.endpoints.delete(key);
      const { host } = endpoint;
      host.endpoints -= 1;
      host.waiting.delete(endpoint);
      if (host.endpoints === 0) this.hosts.delete(host.origin);
    }
  }
}
