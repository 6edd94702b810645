import { enterAhead } from '../../lib/priority-line.js';
import { raceTimer } from '../../lib/timer-race.js';
import type { Circuit } from './breaker.js';

/** A deferred delivery's delayed job, as the queue finds it: its own single job, or a parked batch holding it and others. */
export interface DeferredRef {
  /** Picks the queue partition (every delivery of a parked batch has its partition). */
  webhookId: string;
  /** The single job's id (its delivery id) or the parked batch's. */
  jobId: string;
  /** Deliveries the job holds: 1 for a single job. */
  deliveries: number;
  parked: boolean;
  /** A FIFO line whose head waits (`jobId` is the line's id): woken by making the line due now. */
  line?: true;
  /** Of a high-priority webhook: woken before the normal ones waiting behind the endpoint. */
  high?: true;
}

/** `ref`, marked high-priority when `high` (see DeferredRef.high). */
export function withPriority(ref: DeferredRef, high: boolean | undefined): DeferredRef {
  return high === true ? { ...ref, high: true } : ref;
}

/** Moves deferred jobs back to the front of their queue (a job no longer delayed is left alone). */
export type Promote = (refs: readonly DeferredRef[]) => Promise<void>;

/** The deliveries deferred behind one endpoint, each until it runs by itself; `watching` while a watch runs. */
export interface DeferredDeliveries {
  refs: { ref: DeferredRef; untilMs: number }[];
  watching: boolean;
}

/** What the wakeups need of an endpoint (registry.ts): its breaker, and where its deferred deliveries wait. */
export interface WakeupEndpoint {
  readonly circuit: Pick<Circuit, 'admit' | 'settled' | 'hasInflight'>;
  deferred: DeferredDeliveries | undefined;
}

/** The suspect share of the send slots, which a contact to an unproven endpoint needs. */
export interface ContactRoom {
  /** Suspect slots free now. */
  free(): number;
  /** Resolves when a suspect slot is given back. */
  freed(): Promise<void>;
}

/** How long promoted deliveries get to start before the room at their endpoint is looked at again. */
const ROOM_RECHECK_MS = 50;
/** How long a promoted contact gets to start its attempt here before another is promoted (it may have run elsewhere). */
const CONTACT_START_MS = 2_000;

/** Deferred deliveries remembered per endpoint at most; beyond it they simply wait out their delay. */
const WAITING_MAX = 10_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Takes refs off the front holding `room` deliveries in all, and at least one ref. */
function takeUpTo(entry: DeferredDeliveries, room: number): DeferredRef[] {
  let count = 0;
  let taken = 0;
  while (taken < entry.refs.length && (taken === 0 || count + entry.refs[taken]!.ref.deliveries <= room)) {
    count += entry.refs[taken]!.ref.deliveries;
    taken += 1;
  }
  return entry.refs.splice(0, taken).map((r) => r.ref);
}

/**
 * Brings deliveries deferred behind an endpoint back as soon as it takes deliveries again, instead
 * of at the time they were deferred to, and meanwhile sends it one delivery at a time. A delivery
 * held back behind an endpoint that has not proven itself (no answer yet, slow lately, or the
 * suspect share of the slots taken) is deferred for long (the hold), once: while nothing is in
 * flight to the endpoint and a suspect slot is free, this process promotes one of them as the
 * endpoint's next contact; when an attempt is answered in time, the rest follow at once. So a
 * receiver that hangs costs one attempt at a time and each delivery behind it one deferral, and a
 * healthy receiver never sees a gap of a whole timeout. Behind an open circuit, one is promoted when
 * the open period ends (the probe). Deliveries deferred behind the endpoint's concurrency limit come
 * back as many at a time as it has room for (`room`), as its attempts end. Deferrals are durable
 * jobs first: a process that dies before waking them loses nothing, its jobs just run at their delay.
 */
export class DeferralWakeups<E extends WakeupEndpoint> {
  constructor(
    private readonly endpoints: { ensure(key: string): E; get(key: string): E | undefined },
    private readonly promote: Promote,
    private readonly nowMs: () => number,
    private readonly onError: (error: Error) => void = () => undefined,
    private readonly room: (endpoint: E) => number = () => Infinity,
    private readonly contacts: ContactRoom = { free: () => 1, freed: () => new Promise<void>(() => undefined) },
  ) {}

  /** Call once the deferred jobs exist in the queue; `untilMs` is when they run by themselves anyway. */
  register(key: string, refs: readonly DeferredRef[], untilMs: number): void {
    if (refs.length === 0) return;
    const endpoint = this.endpoints.ensure(key);
    const entry = (endpoint.deferred ??= { refs: [], watching: false });
    for (const ref of refs) {
      if (entry.refs.length >= WAITING_MAX) break;
      if (ref.high === true) enterAhead(entry.refs, { ref, untilMs }, (waiting) => waiting.ref.high !== true);
      else entry.refs.push({ ref, untilMs });
    }
    if (!entry.watching) {
      entry.watching = true;
      void this.watch(endpoint, entry).catch((error: Error) => this.onError(error));
    }
  }

  /** Deferred deliveries this process still holds for the endpoint of `key` (tests and metrics). */
  pending(key: string): number {
    return this.endpoints.get(key)?.deferred?.refs.length ?? 0;
  }

  private async watch(endpoint: E, entry: DeferredDeliveries): Promise<void> {
    const { circuit } = endpoint;
    try {
      for (;;) {
        const nowMs = this.nowMs();
        entry.refs = entry.refs.filter((r) => r.untilMs > nowMs);
        if (entry.refs.length === 0) return;
        const earliestMs = Math.min(...entry.refs.map((r) => r.untilMs));
        const admission = circuit.admit(nowMs);
        if (admission.admitted && admission.lane === 'healthy') {
          const room = this.room(endpoint);
          if (room > 0) await this.promote(takeUpTo(entry, room));
          if (entry.refs.length === 0) continue;
          // At its concurrency limit: the rest follow as attempts end, or, when the attempts that hold
          // it have not started yet, once they had a moment to.
          if (!circuit.hasInflight()) await sleep(ROOM_RECHECK_MS);
          else await this.settledOr(endpoint, earliestMs);
        } else if (admission.admitted) {
          // Unproven, slow lately, or a probe is due: one contact at a time, when a suspect slot is free.
          if (this.contacts.free() > 0) {
            await this.promote(entry.refs.splice(0, 1).map((r) => r.ref));
            await this.contactStarted(endpoint);
            if (circuit.hasInflight()) await this.settledOr(endpoint, earliestMs);
          } else await this.freedOr(earliestMs);
        } else if (admission.reason === 'open') {
          // Until the open period ends; then a probe is promoted.
          await sleep(Math.min(admission.retryAtMs, earliestMs) - nowMs);
        } else await this.settledOr(endpoint, earliestMs);
      }
    } finally {
      entry.watching = false;
      if (entry.refs.length === 0 && endpoint.deferred === entry) endpoint.deferred = undefined;
    }
  }

  /** Until an attempt to the endpoint ends, or `untilMs`. */
  private async settledOr(endpoint: E, untilMs: number): Promise<void> {
    await raceTimer(endpoint.circuit.settled(), Math.max(0, untilMs - this.nowMs()), undefined);
  }

  /** Until a suspect slot is given back, or `untilMs`. */
  private async freedOr(untilMs: number): Promise<void> {
    await raceTimer(this.contacts.freed(), Math.max(0, untilMs - this.nowMs()), undefined);
  }

  /** Until the promoted contact's attempt is in flight here, or CONTACT_START_MS. */
  private async contactStarted(endpoint: E): Promise<void> {
    const deadline = this.nowMs() + CONTACT_START_MS;
    while (!endpoint.circuit.hasInflight() && this.nowMs() < deadline) await sleep(ROOM_RECHECK_MS);
  }
}
