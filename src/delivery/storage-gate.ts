/**
 * Whether this process may start new sends. It closes the moment storage is known to be failing (an
 * attempt could not be recorded, the connection dropped) and opens again once a probe answers.
 *
 * Why: an attempt that is sent but cannot be recorded is sent again when its job runs again after
 * the outage. Sending while storage is down therefore repeats every send of the outage; with the
 * gate, a process repeats at most the attempts it had in flight when the outage began.
 *
 * `epoch` counts closings. A job that started before a closing may have lost its queue lock during
 * the outage, and another worker may run it again; so a job compares the epoch it started in with
 * the current one before each send, and stops (leaving its work to the re-run) when they differ.
 */
export class StorageGate {
  private isOpen = true;
  private closings = 0;
  private waiters: (() => void)[] = [];
  private probing = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    /** Resolves true when storage answers. */
    private readonly probe: () => Promise<boolean>,
    private readonly onChange: (open: boolean) => void = () => undefined,
    private readonly probeEveryMs = 250,
  ) {}

  get open(): boolean {
    return this.isOpen;
  }

  /** How many times the gate has closed; compare with the value a job started with. */
  get epoch(): number {
    return this.closings;
  }

  /** May a job that started in `epoch` send now? */
  allows(epoch: number): boolean {
    return this.isOpen && epoch === this.closings;
  }

  /** Storage failed: no new sends until a probe answers. */
  close(): void {
    if (!this.isOpen || this.stopped) return;
    this.isOpen = false;
    this.closings += 1;
    this.onChange(false);
    this.scheduleProbe(this.probeEveryMs);
  }

  /** Probe now (e.g. the connection says it is ready again) rather than at the next tick. */
  check(): void {
    if (!this.isOpen) this.scheduleProbe(0);
  }

  /** Resolves once the gate is open. */
  whenOpen(): Promise<void> {
    if (this.isOpen) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Stops probing (shutdown); waiters stay pending. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private scheduleProbe(afterMs: number): void {
    if (this.stopped || this.probing) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.runProbe(), afterMs);
    this.timer.unref();
  }

  private async runProbe(): Promise<void> {
    this.probing = true;
    const answered = await this.probe().catch(() => false);
    this.probing = false;
    if (this.stopped || this.isOpen) return;
    if (!answered) return this.scheduleProbe(this.probeEveryMs);
    this.isOpen = true;
    this.onChange(true);
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }
}
