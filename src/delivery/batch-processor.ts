import type { Job } from 'bullmq';
import type { DeferralWrite } from '../store/delivery-log.js';
import { deliverySteps, type AttemptEnd, type DeliveryProcessorDeps } from './attempt.js';
import { BatchHolds } from './batch-holds.js';
import type { DeferredRef } from './endpoints/wakeups.js';
import { Lease, type GiveUp } from './endpoints/admission.js';
import type { DeliverJob } from '../domain/delivery.js';
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

/** One round of waiting for first contacts: the deliveries that began admission in it give up together. */
function giveUpRound(): GiveUp & { giveUp(): void } {
  let resolve: () => void = () => undefined;
  const round = { given: false, when: new Promise<void>((r) => (resolve = r)), giveUp: () => undefined as void };
  round.giveUp = () => {
    round.given = true;
    resolve();
  };
  return round;
}

/** How long a batch waits once only deliveries to suspect endpoints are left in it. */
const SUSPECT_ONLY_HOLD_MS = 50;

/**
 * The batch job processor: first attempts of many deliveries, run concurrently within the process's
 * send slots, recorded one by one. A delivery that needs another try leaves the batch as a single
 * job (retry after its delay; still waiting on a slow endpoint when the batch checks: see
 * BatchHolds), or, deferred behind its endpoint, parked: the batch's deferrals behind one endpoint
 * become one delayed batch job (a park), which the endpoint's wakeup brings back as one. A re-run
 * batch (the worker died, storage failed, or an unexpected error) first reads each delivery's
 * record and sends only what has not been attempted and is its own, so a crash repeats at most what
 * was in flight.
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
    const deferred: { data: DeliverJob; wakeOn: string | undefined; retryAtMs: number; dueAtMs: number; parkable: boolean }[] = [];
    /** Deliveries of paused webhooks, by webhook: parked together until enabled, or their hold ends. */
    const paused = new Map<string, { deliveries: DeliverJob[]; untilMs: number }>();
    const handOffs: DeferralWrite[] = [];
    let todo = deliveries;
    let skipped = 0;
    /** Deliveries parked (singles are counted by their list). */
    let left = 0;

    // 1. A re-run: skip what is finished; re-queue what waits in a job of its own, a single job (a
    // retry, a hand-off) or a park (each a no-op if its job is queued); send what was never
    // attempted, or was parked in this very job.
    if (job.attemptsStarted > 1 || job.attemptsMade > 0) {
      const progress = await deps.recorder.progressOf(deliveries);
      const nowMs = deps.nowMs();
      const reparked = new Map<string, { deliveries: DeliverJob[]; atMs: number }>();
      todo = deliveries.filter((data, i) => {
        const p = progress[i];
        if (p === undefined) return true;
        if (p.parkedIn !== undefined) {
          if (p.parkedIn === job.id) return true;
          const park = reparked.get(p.parkedIn) ?? { deliveries: [], atMs: p.nextAttemptAtMs ?? nowMs };
          park.deliveries.push(data);
          reparked.set(p.parkedIn, park);
          return false;
        }
        if (p.status === 'retrying' || p.status === 'pending') leave(data, (p.nextAttemptAtMs ?? nowMs) - nowMs);
        else {
          skipped += 1;
          steps.finish({ kind: 'skipped', job: data });
        }
        return false;
      });
      if (reparked.size > 0)
        await deps.singles.park([...reparked].map(([jobId, park]) => ({ jobId, deliveries: park.deliveries, delayMs: park.atMs - nowMs })));
      for (const park of reparked.values()) left += park.deliveries.length;
    }

    // 2. Every delivery concurrently; the batch waits for them, handing off the ones that hold it up.
    const holds = new BatchHolds<DeliverJob>(rules, deps.nowMs, todo.length);
    let attempted = 0;
    let giveUp = giveUpRound();
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
      if ('heldUntilMs' in prepared) {
        const hold = paused.get(data.webhookId) ?? { deliveries: [], untilMs: prepared.heldUntilMs };
        hold.deliveries.push(data);
        hold.untilMs = Math.min(hold.untilMs, prepared.heldUntilMs);
        paused.set(data.webhookId, hold);
        steps.finish({ kind: 'deferred', job: data, reason: 'webhook_paused' });
        return;
      }
      const dueAtMs = data.acceptedAtMs + firstDelayMs;
      // Not spread: the wakeups bring a batch's deferrals back when their endpoint answers.
      const admitted = await steps.admit(prepared.webhook, { dueAtMs, epoch, giveUp, onWaiting, deferJitterMs: 0, roomWaitMs: 0, wokenByWakeups: true });
      let end: AttemptEnd;
      if (admitted instanceof Lease) {
        holds.started(data, admitted.slot === 'suspect');
        attempted += 1;
        wake();
        try {
          end = await steps.attempt(data, prepared.webhook, 1, admitted);
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
        // Behind a concurrency limit they come back a few at a time, as the endpoint has room: alone.
        deferred.push({ data, wakeOn: admitted.wakeOn, retryAtMs: admitted.retryAtMs, dueAtMs, parkable: admitted.reason !== 'concurrency' });
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
      void added.then(() => deps.singles.promote([{ webhookId: data.webhookId, jobId: data.deliveryId, parked: false }])).catch(() => undefined);
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
        giveUp.giveUp();
        giveUp = giveUpRound();
      }
      for (const { item, dueAtMs } of check.handOff) {
        leave(item, dueAtMs - deps.nowMs());
        handOffs.push({ job: item, nextAttemptAtMs: dueAtMs, dueAtMs: item.acceptedAtMs + firstDelayMs, ifNoRecord: true });
      }
    }

    // 3. Deferrals behind an endpoint that will take them all at once when it does (unproven, slow,
    // circuit open) are parked together: one delayed batch job per endpoint (the batch is of one
    // partition), due when the earliest of them is. The others leave as single jobs: behind a
    // concurrency limit (they come back as it has room), a rate limit (each its place in line) or a
    // Retry-After pause.
    const nowMs = deps.nowMs();
    const parks = new Map<string, { deliveries: DeliverJob[]; dueAtMs: number[]; untilMs: number }>();
    const marks: DeferralWrite[] = [...handOffs];
    const alone = new Map<string, { refs: DeferredRef[]; untilMs: number }>();
    for (const { data, wakeOn, retryAtMs, dueAtMs, parkable } of deferred) {
      if (wakeOn === undefined || !parkable) {
        leave(data, retryAtMs - nowMs);
        marks.push({ job: data, nextAttemptAtMs: retryAtMs, dueAtMs });
        if (wakeOn !== undefined) {
          const entry = alone.get(wakeOn) ?? { refs: [], untilMs: 0 };
          entry.refs.push({ webhookId: data.webhookId, jobId: data.deliveryId, deliveries: 1, parked: false });
          entry.untilMs = Math.max(entry.untilMs, retryAtMs);
          alone.set(wakeOn, entry);
        }
        continue;
      }
      const park = parks.get(wakeOn) ?? { deliveries: [], dueAtMs: [], untilMs: retryAtMs };
      park.deliveries.push(data);
      park.dueAtMs.push(dueAtMs);
      park.untilMs = Math.min(park.untilMs, retryAtMs);
      parks.set(wakeOn, park);
    }
    const parked = [...parks].map(([endpoint, park]) => ({
      endpoint,
      jobId: parkIdOf(
        job.id ?? '',
        park.deliveries.map((d) => d.deliveryId),
      ),
      ...park,
    }));
    // A paused webhook's deliveries are parked too, one park per webhook, noted as held (before the
    // park exists: see pause-holds.ts) so that an enable brings them back; due when the earliest
    // hold ends (the park then holds the rest again).
    const pausedParks = [...paused].map(([webhookId, hold]) => ({
      webhookId,
      jobId: parkIdOf(
        job.id ?? '',
        hold.deliveries.map((d) => d.deliveryId),
      ),
      dueAtMs: hold.deliveries.map((d) => d.acceptedAtMs + firstDelayMs),
      ...hold,
    }));
    await Promise.all(pausedParks.map((park) => deps.holds.hold(park.webhookId, [{ jobId: park.jobId, parked: true }], park.untilMs)));
    for (const park of [...parked, ...pausedParks]) {
      park.deliveries.forEach((data, i) => marks.push({ job: data, nextAttemptAtMs: park.untilMs, dueAtMs: park.dueAtMs[i]!, parkedIn: park.jobId }));
      left += park.deliveries.length;
    }
    // Deferred and handed-off deliveries get a record before their job exists: a re-run of this batch
    // (it failed after this point) then finds them pending in a job of their own and leaves them to
    // it, instead of sending them a second time beside it.
    if (marks.length > 0) await deps.recorder.recordDeferred(marks);
    try {
      await Promise.all([
        deps.singles.addSingles(singles),
        parked.length + pausedParks.length === 0
          ? undefined
          : deps.singles.park(
              [...parked, ...pausedParks].map(({ jobId, deliveries: held, untilMs }) => ({ jobId, deliveries: held, delayMs: untilMs - nowMs })),
            ),
      ]);
    } finally {
      singlesAdded();
    }
    await Promise.all(pausedParks.map(({ webhookId, jobId }) => steps.recheckHold(webhookId, [{ jobId, parked: true }])));
    // Only now are the parks and single jobs in the queue to be woken.
    for (const { endpoint, jobId, deliveries: held, untilMs } of parked) {
      deps.wakeups.register(endpoint, [{ webhookId: held[0]!.webhookId, jobId, deliveries: held.length, parked: true }], untilMs);
    }
    for (const [endpoint, { refs, untilMs }] of alone) deps.wakeups.register(endpoint, refs, untilMs);
    // Storage failed, or an unexpected error: re-run the batch; finished deliveries are skipped.
    if (failure !== undefined) throw failure;
    return { deliveries: deliveries.length, attempted, handedOff: singles.length + left, skipped };
  };
}
