/**
 * The delivery attempts one worker process runs at once: `total` slots handed out first come, first
 * served, of which at most `suspectMax` may go to suspect endpoints (never answered yet, or slow
 * lately). A suspect attempt that finds their share taken is not queued: the caller defers it, so
 * hanging receivers never hold more than their share and healthy endpoints keep the rest.
 */
export class SendSlots {
  private used = 0;
  private suspectUsed = 0;
  private waiters: (() => void)[] = [];
  private head = 0;
  private idleWaiters: (() => void)[] = [];
  private suspectWaiters: (() => void)[] = [];

  constructor(
    readonly total: number,
    readonly suspectMax: number,
  ) {
    if (!Number.isInteger(total) || total < 1) throw new RangeError(`total must be a positive integer, got ${total}`);
    if (!Number.isInteger(suspectMax) || suspectMax < 1 || suspectMax > total)
      throw new RangeError(`suspectMax must be 1…${total}, got ${suspectMax}`);
  }

  /** Attempts running now. */
  get inFlight(): number {
    return this.used;
  }

  /** Takes a slot now if one is free and nobody waits for one (give it back with release()). */
  tryAcquire(): boolean {
    if (this.used >= this.total || this.head !== this.waiters.length) return false;
    this.used += 1;
    return true;
  }

  /** Resolves once a slot is held (give it back with release()). */
  acquire(): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Turns a held slot into a suspect one; false (the slot stays held, as healthy) when their share is taken. */
  markSuspect(): boolean {
    if (this.suspectUsed >= this.suspectMax) return false;
    this.suspectUsed += 1;
    return true;
  }

  /** Suspect slots free now. */
  suspectFree(): number {
    return this.suspectMax - this.suspectUsed;
  }

  /** Resolves when a suspect slot is given back. */
  suspectFreed(): Promise<void> {
    return new Promise((resolve) => this.suspectWaiters.push(resolve));
  }

  /** Gives a slot back (`suspect`: it was marked suspect). */
  release(suspect = false): void {
    if (suspect) {
      this.suspectUsed -= 1;
      const waiting = this.suspectWaiters;
      this.suspectWaiters = [];
      for (const resolve of waiting) resolve();
    }
    this.used -= 1;
    while (this.used < this.total && this.head < this.waiters.length) {
      const resolve = this.waiters[this.head]!;
      this.head += 1;
      this.used += 1;
      resolve();
    }
    if (this.head === this.waiters.length) {
      this.waiters = [];
      this.head = 0;
    } else if (this.head > 1_024 && this.head * 2 > this.waiters.length) {
      this.waiters = this.waiters.slice(this.head);
      this.head = 0;
    }
    if (this.used === 0 && this.idleWaiters.length > 0) {
      const idle = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of idle) resolve();
    }
  }

  /** Resolves once no attempt is running. */
  idle(): Promise<void> {
    if (this.used === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
