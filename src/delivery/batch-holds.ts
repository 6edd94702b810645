/** How long a batch waits on what holds it up (docs/delivery-semantics.md, "Batches" and "Isolation"). */
export interface BatchHoldRules {
  /** An attempt to a healthy endpoint is handed off after this long (the attempt goes on). */
  batchHoldMs: number;
  /** The hold-up check's period; also how long an attempt to a suspect endpoint holds the batch. */
  suspectHoldMs: number;
  /** The check's period once only deliveries to suspect endpoints are left. */
  suspectOnlyHoldMs: number;
  /** The attempt timeout: a handed-off delivery's single job is due after its attempt's timeout and 1 s. */
  deliveryTimeoutMs: number;
}

/** What a hold-up check decided. */
export interface HoldCheck<T> {
  /** Deliveries waiting for an endpoint's first answer stop waiting (the processor defers them). */
  giveUpWaiters: boolean;
  /** Attempts in flight that leave the batch as single jobs, each due at `dueAtMs`. */
  handOff: { item: T; dueAtMs: number }[];
}

/**
 * The hold-up rules of one batch run, apart from its timers and I/O so they can be tested with a
 * fixed clock. The batch waits for its deliveries, but nothing may hold it for long: every
 * `suspectHoldMs` (every `suspectOnlyHoldMs` once only deliveries to suspect endpoints are left,
 * since waiting longer then only delays the batch) a check gives up on first-contact waits and
 * hands off attempts past their hold: `suspectHoldMs` for a suspect endpoint (nothing once only
 * those are left), `batchHoldMs` for any. A handed-off delivery no longer counts as pending; its
 * attempt goes on and its single job reads the record. While the batch may not hand off (storage
 * failed since it started, so it will run again and must stay the only owner of its deliveries)
 * a check hands off nothing and the hold starts over.
 */
export class BatchHolds<T> {
  private pendingCount: number;
  private waitingCount = 0;
  private readonly inflight = new Map<T, { startedMs: number; suspect: boolean }>();
  private readonly handedOff = new Set<T>();
  /** Attempts in flight to suspect endpoints and not handed off: kept as a count, read after every settle. */
  private suspectInflight = 0;
  private holdStartedMs: number;
  private lastOnlySuspect: boolean;

  constructor(
    private readonly rules: BatchHoldRules,
    private readonly nowMs: () => number,
    deliveries: number,
  ) {
    this.pendingCount = deliveries;
    this.holdStartedMs = nowMs();
    this.lastOnlySuspect = false;
  }

  /** Deliveries the batch still waits for (neither settled nor handed off). */
  get pending(): number {
    return this.pendingCount;
  }

  /** An attempt started (`suspect`: to a suspect endpoint). */
  started(item: T, suspect: boolean): void {
    this.ended(item);
    this.inflight.set(item, { startedMs: this.nowMs(), suspect });
    if (suspect && !this.handedOff.has(item)) this.suspectInflight += 1;
  }

  /** An attempt ended (answered, failed or timed out). */
  ended(item: T): void {
    const entry = this.inflight.get(item);
    if (entry === undefined) return;
    this.inflight.delete(item);
    if (entry.suspect && !this.handedOff.has(item)) this.suspectInflight -= 1;
  }

  /** A delivery is done with, whatever its outcome; one handed off was already counted. */
  settled(item: T): void {
    if (!this.handedOff.has(item)) this.pendingCount -= 1;
  }

  isHandedOff(item: T): boolean {
    return this.handedOff.has(item);
  }

  /** A delivery starts (true) or stops (false) waiting for an endpoint's first answer. */
  waiting(waiting: boolean): void {
    this.waitingCount += waiting ? 1 : -1;
  }

  /** How long until the next check, from now. */
  nextCheckInMs(): number {
    this.lastOnlySuspect = this.onlySuspectLeft();
    const holdMs = this.lastOnlySuspect
      ? Math.min(this.rules.suspectOnlyHoldMs, this.rules.suspectHoldMs)
      : this.rules.suspectHoldMs;
    return Math.max(0, this.holdStartedMs + holdMs - this.nowMs());
  }

  /**
   * Whether the batch's wait must look again now: nothing is pending, or what is left changed between
   * "only suspect endpoints" and not (which changes the hold). Anything else leaves the wait as it is,
   * so a settle need not cost the waiting loop a timer.
   */
  needsLook(): boolean {
    return this.pendingCount === 0 || this.lastOnlySuspect !== this.onlySuspectLeft();
  }

  /** Something changed before the check was due: a hold that no longer applies starts over. */
  changed(): void {
    if (this.lastOnlySuspect !== this.onlySuspectLeft()) this.holdStartedMs = this.nowMs();
  }

  /** The check is due. `mayHandOff` false: the batch keeps everything and the hold starts over. */
  check(mayHandOff: boolean): HoldCheck<T> {
    const nowMs = this.nowMs();
    const onlySuspect = this.lastOnlySuspect;
    this.holdStartedMs = nowMs;
    if (!mayHandOff) return { giveUpWaiters: false, handOff: [] };
    const handOff: HoldCheck<T>['handOff'] = [];
    for (const [item, { startedMs, suspect }] of this.inflight) {
      const holdMs = suspect ? (onlySuspect ? 0 : this.rules.suspectHoldMs) : this.rules.batchHoldMs;
      if (nowMs - startedMs < holdMs || this.handedOff.has(item)) continue;
      this.settled(item);
      this.handedOff.add(item);
      if (suspect) this.suspectInflight -= 1;
      handOff.push({ item, dueAtMs: startedMs + this.rules.deliveryTimeoutMs + 1_000 });
    }
    return { giveUpWaiters: true, handOff };
  }

  /** Everything left waits on suspect endpoints: nothing healthy is left to wait for. */
  private onlySuspectLeft(): boolean {
    return this.pendingCount > 0 && this.pendingCount === this.waitingCount + this.suspectInflight;
  }
}
