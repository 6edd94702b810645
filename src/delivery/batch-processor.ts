import type { Job } from 'bullmq';
import type { DeferralWrite } from '../store/delivery-log.js';
import { deliverySteps, type AttemptEnd, type DeliveryProcessorDeps } from './attempt.js';
import { BatchHolds } from './batch-holds.js';
import type { DeliverJob } from '../domain/delivery.js';
import { JOBS } from './jobs.js';
import type { SingleDelivery } from './queue.js';
import { StorageUnavailableError } from './signals.js';

/** How a batch job run ended. */
export interface BatchSummary {
  deliveries: number;
  attempted: number;
  /** Left the batch as single jobs: retries, deferrals and hand-offs. */
  handedOff: number;
  skipped: number;
}

/** How long a batch waits once only deliveries to suspect endpoints are left in it. */
const SUSPECT_ONLY_HOLD_MS = 50;

/**
 * The batch job processor: first attempts of many deliveries, run concurrently within the process's
 * send slots, recorded one by one. A delivery that needs another try leaves the batch as a single
 * job (retry after its delay; deferred by its breaker; still waiting on a slow endpoint when the
 * batch checks: see BatchHolds). A re-run batch (the worker died, storage failed, or an unexpected
 * error) first reads each delivery's record and sends only what has not been attempted, so a crash
 * repeats at most what was in flight.
 */
export function createBatchProcessor(deps: DeliveryProcessorDeps): (job: Job) => Promise<BatchSummary> {
  const steps = deliverySteps(deps);
  const firstDelayMs = deps.retryScheduleMs[0] ?? 0;
  const rules = {
    batchHoldMs: deps.batchHoldMs,
    suspectHoldMs: deps.suspectHoldMs,
    suspectOnlyHoldMs: SUSPECT_ONLY_HOLD_MS,
    deliveryTimeoutMs: deps.deliveryTimeoutMs,
  };

  return async (job) => {
    const { deliveries } = JOBS.deliverBatch.schema.parse(job.data);
    const epoch = deps.gate.epoch;
    const singles: SingleDelivery[] = [];
    const leave = (data: DeliverJob, delayMs: number) => singles.push({ job: data, delayMs: Math.max(0, delayMs) });
    const deferred: { data: DeliverJob; wakeOn: string | undefined; retryAtMs: number; dueAtMs: number }[] = [];
    const handOffs: DeferralWrite[] = [];
    let todo = deliveries;
    let skipped = 0;

    // 1. A re-run: skip what is finished, re-queue what waits for a retry or was deferred (a no-op
    // if its job is queued).
    if (job.attemptsStarted > 1 || job.attemptsMade > 0) {
      const progress = await deps.recorder.progressOf(deliveries);
      const nowMs = deps.nowMs();
      todo = deliveries.filter((data, i) => {
        const p = progress[i];
        if (p === undefined) return true;
        if (p.status === 'retrying' || p.status === 'pending') leave(data, (p.nextAttemptAtMs ?? nowMs) - nowMs);
        else {
          skipped += 1;
          steps.finish({ kind: 'skipped', job: data });
        }
        return false;
      });
    }

    // 2. Every delivery concurrently; the batch waits for them, handing off the ones that hold it up.
    const holds = new BatchHolds<DeliverJob>(rules, deps.nowMs, todo.length);
    let attempted = 0;
    let giveUpNow: () => void = () => undefined;
    let giveUp = new Promise<void>((resolve) => (giveUpNow = resolve));
    // Woken whenever a delivery settles or starts or stops waiting, to look again at what holds the batch.
    let wake: () => void = () => undefined;
    const onWaiting = (waiting: boolean) => {
      holds.waiting(waiting);
      wake();
    };

    let failure: Error | undefined;
    // Settled once this batch's single jobs exist (or adding them failed).
    let singlesAdded: () => void = () => undefined;
    const added = new Promise<void>((resolve) => (singlesAdded = resolve));
    const run = async (data: DeliverJob) => {
      const prepared = await steps.prepare(data, 1);
      if ('finished' in prepared) return;
      const dueAtMs = data.acceptedAtMs + firstDelayMs;
      // Not spread: the wakeups bring a batch's deferrals back when their endpoint answers.
      const admitted = await steps.admit(prepared.webhook, { dueAtMs, epoch, giveUp, onWaiting, deferJitterMs: 0, roomWaitMs: 0 });
      let end: AttemptEnd;
      if (admitted.ok) {
        holds.started(data, admitted.started.suspect);
        attempted += 1;
        wake();
        try {
          end = await steps.attempt(data, prepared.webhook, 1, admitted.started);
        } finally {
          holds.ended(data);
        }
      } else if (admitted.kind === 'circuit_open') {
        end = await steps.recordCircuitOpen(data, prepared.webhook, 1);
      } else if (admitted.kind === 'storage') {
        // Not sent: the re-run of this batch sends it.
        failure ??= new StorageUnavailableError();
        return;
      } else {
        leave(data, admitted.retryAtMs - deps.nowMs());
        deferred.push({ data, wakeOn: admitted.wakeOn, retryAtMs: admitted.retryAtMs, dueAtMs });
        steps.finish({ kind: 'deferred', job: data, reason: admitted.reason });
        return;
      }
      if (!holds.isHandedOff(data)) {
        if (end.retryDelayMs !== undefined) leave(data, end.retryDelayMs);
        return;
      }
      // Handed off while in flight: its single job waits until this attempt would have timed out.
      // The attempt is recorded now, so wake the job: it reads the record and finishes (delivered,
      // dead) or waits for the retry the record schedules, instead of idling in the queue.
      void added.then(() => deps.singles.promote([data])).catch(() => undefined);
    };
    const settle = (data: DeliverJob) => {
      holds.settled(data);
      wake();
    };
    for (const data of todo) {
      run(data).then(
        () => settle(data),
        (error: unknown) => {
          failure ??= error instanceof Error ? error : new Error('delivery step failed', { cause: error });
          settle(data);
        },
      );
    }

    while (holds.pending > 0) {
      const waitMs = holds.nextCheckInMs();
      let timer: NodeJS.Timeout | undefined;
      const woke = await new Promise<boolean>((resolve) => {
        wake = () => resolve(true);
        timer = setTimeout(() => resolve(false), waitMs);
      });
      clearTimeout(timer);
      wake = () => undefined;
      if (holds.pending === 0) break;
      if (woke) {
        holds.changed();
        continue;
      }
      // Once storage has failed since the batch started, it will run again and must stay the only
      // owner of its deliveries: it hands off nothing and waits for its attempts.
      const check = holds.check(deps.gate.allows(epoch));
      if (check.giveUpWaiters) {
        giveUpNow();
        giveUp = new Promise<void>((resolve) => (giveUpNow = resolve));
      }
      for (const { item, dueAtMs } of check.handOff) {
        leave(item, dueAtMs - deps.nowMs());
        handOffs.push({ job: item, nextAttemptAtMs: dueAtMs, dueAtMs: item.acceptedAtMs + firstDelayMs, ifNoRecord: true });
      }
    }

    // 3. Deferred and handed-off deliveries get a record before their single job exists: a re-run of
    // this batch (it failed after this point) then finds them pending and leaves them to that job,
    // instead of sending them a second time beside it.
    const marks = [...deferred.map(({ data, retryAtMs, dueAtMs }) => ({ job: data, nextAttemptAtMs: retryAtMs, dueAtMs })), ...handOffs];
    if (marks.length > 0) await deps.recorder.recordDeferred(marks);
    try {
      await deps.singles.addSingles(singles);
    } finally {
      singlesAdded();
    }
    // Only now are the deferred jobs in the queue to be woken.
    const byEndpoint = new Map<string, { refs: DeliverJob[]; untilMs: number }>();
    for (const { data, wakeOn: endpoint, retryAtMs } of deferred) {
      if (endpoint === undefined) continue;
      const entry = byEndpoint.get(endpoint) ?? { refs: [], untilMs: 0 };
      entry.refs.push(data);
      entry.untilMs = Math.max(entry.untilMs, retryAtMs);
      byEndpoint.set(endpoint, entry);
    }
    for (const [endpoint, { refs, untilMs }] of byEndpoint) deps.wakeups.register(endpoint, refs, untilMs);
    // Storage failed, or an unexpected error: re-run the batch; finished deliveries are skipped.
    if (failure !== undefined) throw failure;
    return { deliveries: deliveries.length, attempted, handedOff: singles.length, skipped };
  };
}
