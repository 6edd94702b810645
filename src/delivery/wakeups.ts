import type { EndpointBreakers } from './breaker.js';

/** A deferred delivery's job, as the queue finds it. */
export interface DeferredRef {
  webhookId: string;
  deliveryId: string;
}

/** Moves deferred jobs back to the front of their queue (a job no longer delayed is left alone). */
export type Promote = (refs: readonly DeferredRef[]) => Promise<void>;

interface Waiting {
  refs: { ref: DeferredRef; untilMs: number }[];
  watching: boolean;
}

/** How long promoted deliveries get to start before the room at their endpoint is looked at again. */
const ROOM_RECHECK_MS = 50;

/** Deferred deliveries remembered per endpoint at most; beyond it they simply wait out their delay. */
const WAITING_MAX = 10_000;

/**
 * Wakes deliveries deferred behind an endpoint as soon as it takes deliveries again, instead of at
 * the time they were deferred to. A delivery deferred behind a first contact was delayed until that
 * attempt's timeout; one deferred behind an open circuit until the probe. When the first contact is
 * answered in time, or a probe closes the circuit, this process promotes the jobs it deferred, so
 * a healthy receiver never sees a gap of a whole timeout. Deliveries deferred behind the endpoint's
 * concurrency limit come back as many at a time as it has room for (`room`), as its attempts end. Deferrals are durable jobs first: a
 * process that dies before waking them loses nothing, its jobs just run at their delay.
 */
export class DeferralWakeups {
  private readonly waiting = new Map<string, Waiting>();

  constructor(
    private readonly breakers: Pick<EndpointBreakers, 'admit' | 'settled' | 'hasInflight'>,
    private readonly promote: Promote,
    private readonly nowMs: () => number,
    private readonly onError: (error: Error) => void = () => undefined,
    private readonly room: (endpoint: string) => number = () => Infinity,
  ) {}

  /** Call once the deferred jobs exist in the queue; `untilMs` is when they run by themselves anyway. */
  register(endpoint: string, refs: readonly DeferredRef[], untilMs: number): void {
    if (refs.length === 0) return;
    let entry = this.waiting.get(endpoint);
    if (!entry) {
      entry = { refs: [], watching: false };
      this.waiting.set(endpoint, entry);
    }
    for (const ref of refs) if (entry.refs.length < WAITING_MAX) entry.refs.push({ ref, untilMs });
    if (!entry.watching) {
      entry.watching = true;
      void this.watch(endpoint, entry).catch((error: Error) => this.onError(error));
    }
  }

  /** Deferred deliveries this process still holds for `endpoint` (tests and metrics). */
  pending(endpoint: string): number {
    return this.waiting.get(endpoint)?.refs.length ?? 0;
  }

  private async watch(endpoint: string, entry: Waiting): Promise<void> {
    try {
      for (;;) {
        const nowMs = this.nowMs();
        entry.refs = entry.refs.filter((r) => r.untilMs > nowMs);
        if (entry.refs.length === 0) return;
        const admission = this.breakers.admit(endpoint, nowMs);
        const healthy = admission.admitted && admission.lane === 'healthy';
        const room = healthy ? this.room(endpoint) : 0;
        if (room > 0) await this.promote(entry.refs.splice(0, room).map((r) => r.ref));
        if (entry.refs.length === 0) continue;
        // A healthy endpoint at its concurrency limit: the rest follow as attempts end, or, when the
        // attempts that hold it have not started yet, once they had a moment to.
        if (healthy && !this.breakers.hasInflight(endpoint)) {
          await new Promise((resolve) => setTimeout(resolve, ROOM_RECHECK_MS));
          continue;
        }
        // Nothing in flight: no answer is coming that would change the endpoint's state here; the
        // deferred jobs run at their own time (a probe among them may close the circuit).
        if (!this.breakers.hasInflight(endpoint)) {
          entry.refs = [];
          return;
        }
        const earliestMs = Math.min(...entry.refs.map((r) => r.untilMs));
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([this.breakers.settled(endpoint), new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, earliestMs - nowMs))))]);
        clearTimeout(timer);
      }
    } finally {
      entry.watching = false;
      if (entry.refs.length === 0) this.waiting.delete(endpoint);
    }
  }
}
