import { withPriority } from './endpoints/wakeups.js';
import { DelayedError, type Job } from 'bullmq';
import type { DeliveryProgress } from '../store/delivery-log.js';
import {
  finish,
  FINISHED,
  recheckHold,
  runDelivery,
  type DeliveryProcessorDeps,
  type FinishedOutcome,
} from './attempt.js';
import { GIVE_UP_NOW } from './endpoints/admission.js';
import type { DeferReason } from './endpoints/deferral.js';
import type { DeliverJob } from '../domain/delivery.js';
import { JOBS } from './jobs.js';
import { RetryLaterError } from './signals.js';

/** A job that ran more than this before its attempt was due goes back to wait (clock skew between workers). */
const EARLY_TOLERANCE_MS = 100;

/** When the attempt after `progress` is due by the schedule (a deferral does not move it). */
export function dueAtOf(
  data: DeliverJob,
  progress: DeliveryProgress | undefined,
  scheduleMs: readonly number[],
): number {
  if (progress?.dueAtMs !== undefined) return progress.dueAtMs;
  if (progress?.status === 'retrying' && progress.nextAttemptAtMs !== undefined) return progress.nextAttemptAtMs;
  return data.acceptedAtMs + (scheduleMs[0] ?? 0);
}

/**
 * The single-delivery job processor (retries, deferrals, replays, test events). Expected outcomes
 * are values; only the last step turns them into BullMQ's language: return (done or dead-lettered),
 * RetryLaterError (retry after a delay), or DelayedError after moveToDelayed (wait without spending
 * an attempt).
 */
export function createSingleProcessor(
  deps: DeliveryProcessorDeps,
): (job: Job, token?: string) => Promise<FinishedOutcome> {
  const wait = async (job: Job, untilMs: number, token?: string): Promise<never> => {
    await job.moveToDelayed(Math.round(untilMs), token);
    throw new DelayedError();
  };

  return async (job, token) => {
    const data = JOBS.deliver.schema.parse(job.data);
    const epoch = deps.gate.epoch;

    // 1. The record knows the attempts made and when the next is due, and the delivery may be
    // finished already (a batch handed it off while its attempt went on; a crash re-ran it).
    const [progress] = await deps.recorder.progressOf([data]);
    if (progress && FINISHED.has(progress.status)) return finish(deps, { kind: 'skipped', job: data });
    const attemptNo = (progress?.attempts ?? 0) + 1;
    const dueAtMs = dueAtOf(data, progress, deps.retryScheduleMs);
    if (dueAtMs > deps.nowMs() + EARLY_TOLERANCE_MS) return wait(job, dueAtMs, token);

    /** Waits until `untilMs` without an attempt, the record saying when it will be tried; `then` once the job is delayed. */
    const defer = async (
      untilMs: number,
      reason: DeferReason,
      then: () => Promise<void> | void = () => undefined,
    ): Promise<never> => {
      await Promise.all([
        job.moveToDelayed(untilMs, token),
        deps.recorder.recordDeferred([{ job: data, nextAttemptAtMs: untilMs, dueAtMs }]),
      ]);
      await then();
      finish(deps, { kind: 'deferred', job: data, reason });
      throw new DelayedError();
    };

    // 2. Find the webhook, then gate, breaker, slot and rate limit (an endpoint that keeps failing
    // or hangs, or a webhook over its rate limit, waits in the queue, not in a slot), then send.
    const run = await runDelivery(deps, data, attemptNo, {
      dueAtMs,
      epoch,
      giveUp: GIVE_UP_NOW,
      forceProbe: data.manual === true,
      deferJitterMs: 1_000,
      roomWaitMs: deps.suspectHoldMs,
    });

    // 3. Steer the queue.
    switch (run.kind) {
      case 'held': {
        const held = [{ jobId: data.deliveryId, parked: false }];
        await deps.holds.hold(data.webhookId, held, run.heldUntilMs);
        return defer(run.heldUntilMs, 'webhook_paused', () => recheckHold(deps, data.webhookId, held));
      }
      case 'storage':
        return wait(job, deps.nowMs() + 1_000 + deps.random() * 1_000, token);
      case 'deferred': {
        const { retryAtMs, wakeOn } = run;
        return defer(retryAtMs, run.reason, () => {
          if (wakeOn !== undefined)
            deps.wakeups.register(
              wakeOn,
              [
                withPriority(
                  { webhookId: data.webhookId, jobId: data.deliveryId, deliveries: 1, parked: false },
                  run.high,
                ),
              ],
              retryAtMs,
            );
        });
      }
    }
    const { finished, retryDelayMs } = run;
    if (retryDelayMs !== undefined)
      throw new RetryLaterError(retryDelayMs, finished.kind === 'attempted' ? finished.outcome : 'unknown');
    return finished;
  };
}
