import { wakeableSleep } from '../lib/timer-race.js';
import type { Job } from 'bullmq';
import type { DeferralWrite } from '../store/delivery-log.js';
import {
  admitAndSend,
  drop,
  finish,
  prepare,
  recheckHold,
  type DeliveryProcessorDeps,
  type SendTracker,
} from './attempt.js';
import { BatchHolds, type BatchHoldRules } from './batch-holds.js';
import { withPriority, type DeferredRef } from './endpoints/wakeups.js';
import { giveUpRound } from './endpoints/admission.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { FirstAttemptBatch } from './first-attempts.js';
import { JOBS, parkIdOf } from './jobs.js';
import type { SingleDelivery } from './queue.js';
import { StorageUnavailableError } from './signals.js';

/** How a batch job run ended. */
export interface BatchSummary {
  deliveries: number;
  attempted: number;
  /** Left the batch for jobs of their own: retries and hand-offs as single jobs, deferrals parked. */
  handedOff: number;
  skipped: number;
}

/** How long a batch waits once only deliveries to suspect endpoints are left in it. */
const SUSPECT_ONLY_HOLD_MS = 50;

/**
 * The batch runner: first attempts of many deliveries (a first-attempt stream entry, or a park), run
 * concurrently within the process's send slots, recorded one by one. A delivery that needs another
 * try leaves the batch as a single job (retry after its delay; still waiting on a slow endpoint when
 * the batch checks: see BatchHolds), or, deferred behind its endpoint, parked: the batch's deferrals behind one endpoint
 * become one delayed batch job (a park), which the endpoint's wakeup brings back as one. A re-run
 * batch (the worker died, storage failed, or an unexpected error) first reads each delivery's
 * record and sends only what has not been attempted and is its own, so a crash repeats at most what
 * was in flight.
 */
export function createBatchRunner(deps: DeliveryProcessorDeps): (batch: FirstAttemptBatch) => Promise<BatchSummary> {
  const rules: BatchHoldRules = {
    batchHoldMs: deps.batchHoldMs,
    suspectHoldMs: deps.suspectHoldMs,
    suspectOnlyHoldMs: SUSPECT_ONLY_HOLD_MS,
    deliveryTimeoutMs: deps.deliveryTimeoutMs,
  };
  return (batch) => new BatchRun(deps, rules, batch).run();
}

/**
 * The batch runner as a BullMQ processor, for batch jobs: parks (a batch's deferrals behind one
 * endpoint) and batches queued before first attempts moved to the streams. A job that ran before
 * is a re-run.
 */
export function batchProcessorOf(
  runBatch: (batch: FirstAttemptBatch) => Promise<BatchSummary>,
): (job: Job) => Promise<BatchSummary> {
  // Async, so that a payload that fails to parse rejects the job's promise rather than throwing.
  return async (job) =>
    runBatch({
      id: job.id ?? '',
      deliveries: JOBS.deliverBatch.schema.parse(job.data).deliveries,
      rerun: job.attemptsStarted > 1 || job.attemptsMade > 0,
    });
}

/** A delivery admission deferred, waiting for the end of the batch to leave it. */
interface BatchDeferral {
  data: DeliverJob;
  wakeOn: string | undefined;
  retryAtMs: number;
  dueAtMs: number;
  /** Parked with the others behind its endpoint (false: leaves alone, as behind a concurrency limit). */
  parkable: boolean;
  /** Of a high-priority webhook (see DeferredRef.high). */
  high: boolean;
}

/** A delayed batch job holding deliveries that leave together. */
interface Park {
  jobId: string;
  deliveries: DeliverJob[];
  dueAtMs: number[];
  untilMs: number;
}

/** One run of one batch job: what it sent, and what leaves it for jobs of their own. */
class BatchRun implements SendTracker {
  private readonly deliveries: DeliverJob[];
  private readonly epoch: number;
  private readonly firstDelayMs: number;
  /** Made once the deliveries to send are known (a re-run reads their records first). */
  private holds!: BatchHolds<DeliverJob>;
  private readonly singles: SingleDelivery[] = [];
  private readonly deferred: BatchDeferral[] = [];
  /** Deliveries of paused webhooks, by webhook: parked together until enabled, or their hold ends. */
  private readonly paused = new Map<string, { deliveries: DeliverJob[]; untilMs: number }>();
  private readonly handOffs: DeferralWrite[] = [];
  private skipped = 0;
  /** Deliveries parked (singles are counted by their list). */
  private parkedCount = 0;
  private attempted = 0;
  private giveUp = giveUpRound();
  /** Wakes the wait for the batch's deliveries (see nudge). */
  private wake: () => void = () => undefined;
  private readonly onWaiting = (waiting: boolean) => {
    this.holds.waiting(waiting);
    this.nudge();
  };
  private failure: Error | undefined;
  /** Settled once this batch's single jobs exist (or adding them failed). */
  private readonly added: Promise<void>;
  private singlesAdded: () => void = () => undefined;

  constructor(
    private readonly deps: DeliveryProcessorDeps,
    private readonly rules: BatchHoldRules,
    private readonly batch: FirstAttemptBatch,
  ) {
    this.deliveries = batch.deliveries;
    this.epoch = deps.gate.epoch;
    this.firstDelayMs = deps.retryScheduleMs[0] ?? 0;
    this.added = new Promise<void>((resolve) => (this.singlesAdded = resolve));
  }

  async run(): Promise<BatchSummary> {
    // 1. A re-run: skip what is finished and re-queue what waits in a job of its own.
    const todo = this.batch.rerun ? await this.triage() : this.deliveries;
    // 2. Every delivery concurrently; the batch waits for them, handing off the ones that hold it up.
    this.holds = new BatchHolds<DeliverJob>(this.rules, this.deps.nowMs, todo.length);
    for (const data of todo) {
      this.runOne(data).then(
        () => this.settle(data),
        (error: unknown) => {
          this.failure ??= error instanceof Error ? error : new Error('delivery step failed', { cause: error });
          this.settle(data);
        },
      );
    }
    await this.waitForAll();
    // 3. What did not finish here leaves in jobs of its own.
    await this.leave();
    // Storage failed, or an unexpected error: re-run the batch; finished deliveries are skipped.
    if (this.failure !== undefined) throw this.failure;
    return {
      deliveries: this.deliveries.length,
      attempted: this.attempted,
      handedOff: this.singles.length + this.parkedCount,
      skipped: this.skipped,
    };
  }

  started(data: DeliverJob, suspect: boolean): void {
    this.holds.started(data, suspect);
    this.attempted += 1;
    this.nudge();
  }

  ended(data: DeliverJob): void {
    this.holds.ended(data);
  }

  recording(data: DeliverJob): boolean {
    if (this.batch.journal !== true || this.holds.isHandedOff(data)) return false;
    // Recorded within moments: no longer in flight, so no check hands it off to a single job, which
    // would read its progress before the journal is projected.
    this.holds.ended(data);
    return true;
  }

  private leaveAsSingle(data: DeliverJob, delayMs: number): void {
    this.singles.push({ job: data, delayMs: Math.max(0, delayMs) });
  }

  /**
   * A re-run: skips what is finished; re-queues what waits in a job of its own, a single job (a
   * retry, a hand-off) or a park (each a no-op if its job is queued); returns what to send: what was
   * never attempted, or was parked in this very job.
   */
  private async triage(): Promise<DeliverJob[]> {
    const { deps, batch } = this;
    const progress = await deps.recorder.progressOf(this.deliveries);
    const nowMs = deps.nowMs();
    const reparked = new Map<string, { deliveries: DeliverJob[]; atMs: number }>();
    const todo = this.deliveries.filter((data, i) => {
      const p = progress[i];
      if (p === undefined) return true;
      if (p.parkedIn !== undefined) {
        if (p.parkedIn === batch.id) return true;
        const park = reparked.get(p.parkedIn) ?? { deliveries: [], atMs: p.nextAttemptAtMs ?? nowMs };
        park.deliveries.push(data);
        reparked.set(p.parkedIn, park);
        return false;
      }
      if (p.status === 'retrying' || p.status === 'pending')
        this.leaveAsSingle(data, (p.nextAttemptAtMs ?? nowMs) - nowMs);
      else {
        this.skipped += 1;
        finish(deps, { kind: 'skipped', job: data });
      }
      return false;
    });
    if (reparked.size > 0)
      await deps.singles.park(
        [...reparked].map(([jobId, park]) => ({ jobId, deliveries: park.deliveries, delayMs: park.atMs - nowMs })),
      );
    for (const park of reparked.values()) this.parkedCount += park.deliveries.length;
    return todo;
  }

  /** One delivery's run, and where it goes from the batch. */
  private async runOne(data: DeliverJob): Promise<void> {
    const { deps } = this;
    const dueAtMs = data.acceptedAtMs + this.firstDelayMs;
    // Its entry referred to the event log for a body the log no longer holds: nothing to send.
    const prepared = this.batch.gone?.has(data) ? await drop(deps, data, 'event_gone') : await prepare(deps, data, 1);
    // Options made once prepared: the delivery joins the round of first-contact waits under way when
    // its admission starts. Not spread: the wakeups bring a batch's deferrals back when their
    // endpoint answers.
    const run =
      'kind' in prepared
        ? prepared
        : await admitAndSend(deps, data, prepared, 1, {
            dueAtMs,
            epoch: this.epoch,
            giveUp: this.giveUp,
            onWaiting: this.onWaiting,
            deferJitterMs: 0,
            roomWaitMs: 0,
            tracker: this,
          });
    switch (run.kind) {
      case 'held': {
        const hold = this.paused.get(data.webhookId) ?? { deliveries: [], untilMs: run.heldUntilMs };
        hold.deliveries.push(data);
        hold.untilMs = Math.min(hold.untilMs, run.heldUntilMs);
        this.paused.set(data.webhookId, hold);
        finish(deps, { kind: 'deferred', job: data, reason: 'webhook_paused' });
        return;
      }
      case 'storage':
        // Not sent: the re-run of this batch sends it.
        this.failure ??= new StorageUnavailableError();
        return;
      case 'deferred':
        // Behind a concurrency limit they come back a few at a time, as the endpoint has room: alone.
        this.deferred.push({
          data,
          wakeOn: run.wakeOn,
          retryAtMs: run.retryAtMs,
          dueAtMs,
          parkable: run.reason !== 'concurrency',
          high: run.high === true,
        });
        finish(deps, { kind: 'deferred', job: data, reason: run.reason });
        return;
    }
    if (!this.holds.isHandedOff(data)) {
      if (run.retryDelayMs !== undefined) this.leaveAsSingle(data, run.retryDelayMs);
      return;
    }
    // Handed off while in flight: its single job waits until this attempt would have timed out.
    // The attempt is recorded now, so wake the job: it reads the record and finishes (delivered,
    // dead) or waits for the retry the record schedules, instead of idling in the queue.
    void this.added
      .then(() => deps.singles.promote([{ webhookId: data.webhookId, jobId: data.deliveryId, parked: false }]))
      .catch(() => undefined);
  }

  private settle(data: DeliverJob): void {
    this.holds.settled(data);
    this.nudge();
  }

  /** A delivery settled, started or stopped waiting: the wait looks again when that changes what holds the batch. */
  private nudge(): void {
    if (this.holds.needsLook()) this.wake();
  }

  /** Waits for every delivery of the batch, handing off those that hold it up (see BatchHolds). */
  private async waitForAll(): Promise<void> {
    const { deps, holds } = this;
    while (holds.pending > 0) {
      const waitMs = holds.nextCheckInMs();
      const woke = await wakeableSleep(waitMs, (wake) => (this.wake = wake));
      this.wake = () => undefined;
      if (holds.pending === 0) break;
      if (woke) {
        holds.changed();
        continue;
      }
      // Once storage has failed since the batch started, it will run again and must stay the only
      // owner of its deliveries: it hands off nothing and waits for its attempts.
      const check = holds.check(deps.gate.allows(this.epoch));
      if (check.giveUpWaiters) {
        this.giveUp.giveUp();
        this.giveUp = giveUpRound();
      }
      for (const { item, dueAtMs } of check.handOff) {
        this.leaveAsSingle(item, dueAtMs - deps.nowMs());
        this.handOffs.push({
          job: item,
          nextAttemptAtMs: dueAtMs,
          dueAtMs: item.acceptedAtMs + this.firstDelayMs,
          ifNoRecord: true,
        });
      }
    }
  }

  /**
   * Deferrals behind an endpoint that will take them all at once when it does (unproven, slow,
   * circuit open) are parked together: one delayed batch job per endpoint (the batch is of one
   * partition), due when the earliest of them is. The others leave as single jobs: behind a
   * concurrency limit (they come back as it has room), a rate limit (each its place in line) or a
   * Retry-After pause. Returns the parks, the writes that note every deferral, and the single
   * deferrals to wake, by endpoint.
   */
  private planDeferrals(nowMs: number) {
    // By endpoint and priority: a high-priority webhook's deferrals are a park of their own, woken first.
    const parks = new Map<string, Omit<Park, 'jobId'> & { endpoint: string; high: boolean }>();
    const marks: DeferralWrite[] = [...this.handOffs];
    const alone = new Map<string, { refs: DeferredRef[]; untilMs: number }>();
    for (const { data, wakeOn, retryAtMs, dueAtMs, parkable, high } of this.deferred) {
      if (wakeOn === undefined || !parkable) {
        this.leaveAsSingle(data, retryAtMs - nowMs);
        marks.push({ job: data, nextAttemptAtMs: retryAtMs, dueAtMs });
        if (wakeOn !== undefined) {
          const entry = alone.get(wakeOn) ?? { refs: [], untilMs: 0 };
          entry.refs.push(
            withPriority({ webhookId: data.webhookId, jobId: data.deliveryId, deliveries: 1, parked: false }, high),
          );
          entry.untilMs = Math.max(entry.untilMs, retryAtMs);
          alone.set(wakeOn, entry);
        }
        continue;
      }
      const key = high ? `${wakeOn} high` : wakeOn;
      const park = parks.get(key) ?? { endpoint: wakeOn, high, deliveries: [], dueAtMs: [], untilMs: retryAtMs };
      park.deliveries.push(data);
      park.dueAtMs.push(dueAtMs);
      park.untilMs = Math.min(park.untilMs, retryAtMs);
      parks.set(key, park);
    }
    const parked = [...parks.values()].map((park) => ({ jobId: this.parkId(park.deliveries), ...park }));
    // A paused webhook's deliveries are parked too, one park per webhook, due when the earliest
    // hold ends (the park then holds the rest again).
    const pausedParks = [...this.paused].map(([webhookId, hold]) => ({
      webhookId,
      jobId: this.parkId(hold.deliveries),
      dueAtMs: hold.deliveries.map((d) => d.acceptedAtMs + this.firstDelayMs),
      ...hold,
    }));
    return { parked, pausedParks, marks, alone };
  }

  private parkId(deliveries: readonly DeliverJob[]): string {
    return parkIdOf(
      this.batch.id,
      deliveries.map((d) => d.deliveryId),
    );
  }

  /** Step 3: records, then queues, what leaves the batch, and only then registers it to be woken. */
  private async leave(): Promise<void> {
    const { deps } = this;
    const nowMs = deps.nowMs();
    const { parked, pausedParks, marks, alone } = this.planDeferrals(nowMs);
    // Paused webhooks' parks are noted as held before they exist (see pause-holds.ts), so that an
    // enable brings them back.
    await Promise.all(
      pausedParks.map((park) => deps.holds.hold(park.webhookId, [{ jobId: park.jobId, parked: true }], park.untilMs)),
    );
    const allParks: Park[] = [...parked, ...pausedParks];
    for (const park of allParks) {
      park.deliveries.forEach((data, i) =>
        marks.push({ job: data, nextAttemptAtMs: park.untilMs, dueAtMs: park.dueAtMs[i]!, parkedIn: park.jobId }),
      );
      this.parkedCount += park.deliveries.length;
    }
    // Deferred and handed-off deliveries get a record before their job exists: a re-run of this batch
    // (it failed after this point) then finds them pending in a job of their own and leaves them to
    // it, instead of sending them a second time beside it.
    if (marks.length > 0) await deps.recorder.recordDeferred(marks);
    try {
      await Promise.all([
        deps.singles.addSingles(this.singles),
        allParks.length === 0
          ? undefined
          : deps.singles.park(
              allParks.map(({ jobId, deliveries: held, untilMs }) => ({
                jobId,
                deliveries: held,
                delayMs: untilMs - nowMs,
              })),
            ),
      ]);
    } finally {
      this.singlesAdded();
    }
    await Promise.all(
      pausedParks.map(({ webhookId, jobId }) => recheckHold(deps, webhookId, [{ jobId, parked: true }])),
    );
    // Only now are the parks and single jobs in the queue to be woken.
    for (const { endpoint, high, jobId, deliveries: held, untilMs } of parked) {
      deps.wakeups.register(
        endpoint,
        [withPriority({ webhookId: held[0]!.webhookId, jobId, deliveries: held.length, parked: true }, high)],
        untilMs,
      );
    }
    for (const [endpoint, { refs, untilMs }] of alone) deps.wakeups.register(endpoint, refs, untilMs);
  }
}
