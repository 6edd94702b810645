import { ConcurrencyLimit, type FlowSignal } from '../../domain/concurrency-limit.js';

/**
 * A receiver host's safety ceiling: the attempts every vendor's endpoint on one origin keeps in
 * flight together. Each vendor's endpoint (vendor + origin) keeps its own breaker and its own
 * adaptive limit, so one vendor's failing path never holds back another's (a path of its own may be
 * rate-limited on its own). But a host with one capacity shared by its paths (a small server taking
 * several vendors' webhooks) then gets every vendor's limit at once: twenty vendors held at one
 * attempt each are still twenty, where the host takes eight, and each gets a 429 storm no limit of
 * its own can stop.
 *
 * So the host has a limit too, the same AIMD rule (domain/concurrency-limit.ts) over all its
 * attempts, which is no limit at all (nothing waits for it) until the host pushes back as a whole;
 * then it comes down from the worker's send slots, and grows back at most to them. The evidence that
 * the host itself is saturated: within the last CORROBORATION_MS, push-back from at least two vendors'
 * endpoints, and from at least half of the vendors' endpoints whose attempts there ended. A single
 * vendor's 429s, timeouts or refused connections (however many), or a few vendors' paths that hang
 * while the others' answer, are those vendors' own and leave the host's limit where it is: the
 * "per-origin safety ceiling that one vendor's failures cannot trip for the others".
 */

/** Evidence older than this says nothing about the host now. */
export const CORROBORATION_MS = 10_000;
/** Vendors' endpoints a host remembers (the most recently seen); more only repeat the evidence. */
const SEEN_MAX = 256;

/** When a vendor's endpoint last ended an attempt at the host, and last pushed back. */
interface Seen {
  endedMs: number;
  pushedBackMs: number;
}

/** A delivery waiting for room at the host: its endpoint, woken as the host's attempts end. */
export interface HostWaiting {
  readonly roomWaiting: number;
}

export class HostCeiling<E extends HostWaiting = HostWaiting> {
  readonly limit = new ConcurrencyLimit();
  /** The endpoints on this host the registry holds (forgotten with the last of them). */
  endpoints = 0;
  /** Endpoints with deliveries waiting in the process because the host was full, oldest first. */
  readonly waiting = new Set<E>();
  /** Endpoint key → what it did there lately, oldest seen first. */
  private readonly seen = new Map<string, Seen>();

  constructor(readonly origin: string) {}

  /**
   * The signal for the host's limit of an attempt of `endpointKey` that ended with `signal`:
   * push-back counts only when it is the host's (see above).
   */
  corroborate(endpointKey: string, signal: FlowSignal, nowMs: number): FlowSignal {
    let seen = this.seen.get(endpointKey);
    if (seen === undefined) {
      if (this.seen.size >= SEEN_MAX) this.seen.delete(this.seen.keys().next().value!);
      seen = { endedMs: nowMs, pushedBackMs: 0 };
      this.seen.set(endpointKey, seen);
    }
    seen.endedMs = nowMs;
    if (signal !== 'congested') return signal;
    seen.pushedBackMs = nowMs;
    const sinceMs = nowMs - CORROBORATION_MS;
    let active = 0;
    let pushing = 0;
    for (const other of this.seen.values()) {
      if (other.endedMs < sinceMs) continue;
      active += 1;
      if (other.pushedBackMs >= sinceMs) pushing += 1;
    }
    return pushing >= 2 && pushing * 2 >= active ? 'congested' : 'neutral';
  }

  /** Nothing in flight and nobody waiting: forgetting it loses only what its limit learnt. */
  idle(nowMs: number): boolean {
    return this.limit.idle(nowMs) && this.waiting.size === 0;
  }
}
