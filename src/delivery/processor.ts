import { DelayedError, type Job } from 'bullmq';
import { signingSecrets, type Webhook } from '../domain/webhook.js';
import type { Logger } from '../logger.js';
import type { DeliveryRecorder, DeliveryStatus } from '../store/delivery-log.js';
import type { WebhookSource } from '../store/webhooks.js';
import { endpointOf, type AttemptHealth, type EndpointBreakers } from './breaker.js';
import { attemptOutcome, decide, type AttemptOutcome, type Decision } from './classify.js';
import type { SendRequest, SendResult } from './http-sender.js';
import { JOBS, type DeliverJob } from './jobs.js';
import type { SingleDelivery } from './queue.js';
import type { SendSlots } from './send-slots.js';
import { signatureHeaders } from './sign.js';

/** What the processors need; the CLI wires the real ones, tests may pass their own clock. */
export interface DeliveryProcessorDeps {
  webhooks: WebhookSource;
  sender: { send(request: SendRequest): Promise<SendResult> };
  recorder: DeliveryRecorder;
  /** Where deliveries that leave a batch (retries, deferrals, hand-offs) go. */
  singles: { addSingles(singles: readonly SingleDelivery[]): Promise<void> };
  breakers: EndpointBreakers;
  /** The attempts this process runs at once. */
  slots: SendSlots;
  logger: Logger;
  /** Delay before each attempt; its length is the number of attempts. */
  retryScheduleMs: readonly number[];
  deliveryTimeoutMs: number;
  /** A webhook whose attempts have all failed for this long is disabled. */
  sustainedFailureMs: number;
  /**
   * How long a batch waits on an attempt to a healthy endpoint before handing it off to a single
   * job (the attempt goes on), so a receiver that starts hanging cannot hold a batch.
   */
  batchHoldMs: number;
  /**
   * How long a batch waits on a suspect endpoint (never answered, or slow lately): deliveries
   * waiting for its first answer, or in flight to it, leave as single jobs after this.
   */
  suspectHoldMs: number;
  nowMs: () => number;
  random: () => number;
  /** Called once per finished attempt or drop (metrics). */
  onOutcome?: (outcome: FinishedOutcome) => void;
}

export type DeferReason = 'open' | 'probing' | 'slow';

/** How a delivery run ended, for the caller and for metrics. */
export type FinishedOutcome =
  | {
      kind: 'attempted';
      job: DeliverJob;
      outcome: AttemptOutcome | 'webhook_disabled';
      decision: Decision['action'];
      durationMs: number;
      endedAtMs: number;
      /** Set when this attempt disabled the webhook. */
      disabled?: 'gone' | 'failing';
    }
  | { kind: 'dropped'; job: DeliverJob }
  | { kind: 'deferred'; job: DeliverJob; reason: DeferReason }
  /** A delivery found already finished (a batch re-run, a hand-off whose attempt succeeded). */
  | { kind: 'skipped'; job: DeliverJob };

/** Thrown to make BullMQ retry after exactly `delayMs` (read by the queue's backoff strategy). */
export class RetryLaterError extends Error {
  override name = 'RetryLaterError';
  constructor(
    readonly delayMs: number,
    outcome: string,
  ) {
    super(`attempt failed (${outcome}); retrying in ${delayMs} ms`);
  }
}

/** BullMQ backoff strategy: the delay our own decision chose, or 5 s after an unexpected error. */
export function backoffFromError(_attemptsMade: number, _type?: string, error?: Error): number {
  return error instanceof RetryLaterError ? error.delayMs : 5_000;
}

/** What an attempt says about the endpoint's health (a 4xx the receiver chose to send is healthy). */
function healthOf(result: SendResult): AttemptHealth {
  if (result.kind === 'error') return result.errorClass === 'timeout' ? 'timeout' : result.errorClass === 'ssrf_blocked' ? 'healthy' : 'failed';
  return result.status >= 500 || result.status === 429 ? 'failed' : 'healthy';
}

const STATUS_OF: Record<Decision['action'], Exclude<DeliveryStatus, 'pending' | 'replayed' | 'dropped'>> = {
  delivered: 'delivered',
  retry: 'retrying',
  dead: 'dead',
  disable: 'dead',
};

const FINISHED: ReadonlySet<DeliveryStatus> = new Set(['delivered', 'dead', 'dropped', 'replayed']);

/** An attempt that may start: its slot is held and the breaker knows it (release both with `end`). */
interface StartedAttempt {
  endpoint: string;
  ticket: number;
  suspect: boolean;
}

type Admitted = { ok: true; started: StartedAttempt } | { ok: false; retryAtMs: number; reason: DeferReason };

/** What ran: the outcome for metrics, and the delay when the delivery must be tried again. */
interface AttemptEnd {
  finished: FinishedOutcome;
  retryDelayMs: number | undefined;
}

/**
 * The steps every delivery shares, whether it runs in a batch or on its own: admission through the
 * endpoint's breaker and a send slot, sign and send, decide, record (one round trip), disable the
 * webhook when it must be, one log line, metrics.
 */
function deliverySteps(deps: DeliveryProcessorDeps) {
  const endpoints = new Map<string, string>();
  const endpointFor = (callbackUrl: string) => {
    let endpoint = endpoints.get(callbackUrl);
    if (endpoint === undefined) {
      if (endpoints.size >= 10_000) endpoints.clear();
      endpoint = endpointOf(callbackUrl);
      endpoints.set(callbackUrl, endpoint);
    }
    return endpoint;
  };

  function finish(outcome: FinishedOutcome): FinishedOutcome {
    deps.onOutcome?.(outcome);
    return outcome;
  }

  /** The delivery's webhook, or a finished outcome when there is nothing to send. */
  async function prepare(data: DeliverJob, attempt: number): Promise<{ webhook: Webhook } | { finished: FinishedOutcome }> {
    const webhook = await deps.webhooks.getById(data.webhookId);
    // A deleted webhook's deliveries are dropped.
    if (!webhook) {
      await deps.recorder.recordDropped(data, deps.nowMs());
      deps.logger.info({ event: 'delivery.dropped', eventId: data.eventId, webhookId: data.webhookId, deliveryId: data.deliveryId }, 'delivery.dropped');
      return { finished: finish({ kind: 'dropped', job: data }) };
    }
    // A disabled webhook's deliveries go straight to the dead letters, replayable once re-enabled.
    if (webhook.disabled) {
      await deps.recorder.recordAttempt({
        job: data,
        attempt: { attempt, atMs: deps.nowMs(), outcome: 'webhook_disabled', durationMs: 0, error: `webhook disabled (${webhook.disabled.reason})` },
        status: 'dead',
      });
      return { finished: finish({ kind: 'attempted', job: data, outcome: 'webhook_disabled', decision: 'dead', durationMs: 0, endedAtMs: deps.nowMs() }) };
    }
    return { webhook };
  }

  /**
   * Waits for the endpoint's breaker and a send slot. `first_contact` waits in the process for the
   * endpoint's first answer (until `giveUp` resolves); a slot is waited for in turn (healthy
   * endpoints always keep part of the slots, so the wait ends). Everything else is deferred.
   */
  async function admit(webhook: Webhook, giveUp: Promise<void>, onWaiting?: (waiting: boolean) => void): Promise<Admitted> {
    const endpoint = endpointFor(webhook.callbackUrl);
    let gaveUp = false;
    void giveUp.then(() => (gaveUp = true));
    for (;;) {
      const pre = deps.breakers.admit(endpoint, deps.nowMs());
      if (!pre.admitted) {
        if (pre.reason !== 'first_contact' || gaveUp) return { ok: false, retryAtMs: pre.retryAtMs, reason: pre.reason === 'first_contact' ? 'slow' : pre.reason };
        onWaiting?.(true);
        await Promise.race([pre.settled, giveUp]);
        onWaiting?.(false);
        continue;
      }
      await deps.slots.acquire();
      const nowMs = deps.nowMs();
      const admission = deps.breakers.admit(endpoint, nowMs);
      if (!admission.admitted) {
        deps.slots.release();
        continue;
      }
      const suspect = admission.lane === 'suspect';
      if (suspect && !deps.slots.markSuspect()) {
        deps.slots.release();
        return { ok: false, retryAtMs: nowMs + 250 + Math.floor(deps.random() * 750), reason: 'slow' };
      }
      return { ok: true, started: { endpoint, ticket: deps.breakers.start(endpoint, nowMs, admission.probe), suspect } };
    }
  }

  /** Signs, sends, decides and records one admitted attempt; always gives the slot back. */
  async function attempt(data: DeliverJob, webhook: Webhook, attemptNo: number, started: StartedAttempt): Promise<AttemptEnd> {
    const startedMs = deps.nowMs();
    let result: SendResult;
    try {
      result = await deps.sender.send(buildRequest(data, webhook, attemptNo, startedMs, deps.deliveryTimeoutMs));
    } catch (error) {
      // send() reports failures as values; an exception is a bug, but must not leak the slot.
      deps.breakers.finish(started.endpoint, started.ticket, 'failed', deps.nowMs());
      deps.slots.release(started.suspect);
      throw error;
    }
    const endedMs = deps.nowMs();
    deps.breakers.finish(started.endpoint, started.ticket, healthOf(result), endedMs);

    const decision = decide({ result, attemptsMade: attemptNo, scheduleMs: deps.retryScheduleMs, nowMs: endedMs, random: deps.random });
    const outcome = attemptOutcome(result);
    // The slot is held until the attempt is recorded: a worker killed at any moment then repeats
    // at most as many attempts as it has slots (sent or answered, but not yet recorded).
    let failingSinceMs: number | undefined;
    try {
      ({ failingSinceMs } = await deps.recorder.recordAttempt({
        job: data,
        attempt: {
          attempt: attemptNo,
          atMs: startedMs,
          outcome,
          durationMs: result.durationMs,
          ...(result.kind === 'response' ? { statusCode: result.status, responseSnippet: result.bodySnippet } : { error: result.message }),
        },
        status: STATUS_OF[decision.action],
        ...(decision.action === 'retry' ? { nextAttemptAtMs: endedMs + decision.delayMs } : {}),
      }));
    } finally {
      deps.slots.release(started.suspect);
    }
    let disabled: 'gone' | 'failing' | undefined;
    if (decision.action === 'disable') {
      if (await deps.webhooks.disable(webhook.id, 'gone')) disabled = 'gone';
    } else if (decision.action !== 'delivered' && failingSinceMs !== undefined && endedMs - failingSinceMs >= deps.sustainedFailureMs) {
      if (await deps.webhooks.disable(webhook.id, 'failing')) disabled = 'failing';
    }

    // One wide log line per attempt.
    deps.logger.info(
      {
        event: 'delivery.attempted',
        eventId: data.eventId,
        eventType: data.eventType,
        webhookId: data.webhookId,
        deliveryId: data.deliveryId,
        attempt: attemptNo,
        outcome,
        status: result.kind === 'response' ? result.status : undefined,
        durationMs: Math.round(result.durationMs),
        decision: decision.action,
        ...(decision.action === 'retry' ? { retryInMs: decision.delayMs } : {}),
        ...(disabled === undefined ? {} : { webhookDisabled: disabled }),
      },
      'delivery.attempted',
    );
    const finished = finish({
      kind: 'attempted',
      job: data,
      outcome,
      decision: decision.action,
      durationMs: result.durationMs,
      endedAtMs: endedMs,
      ...(disabled === undefined ? {} : { disabled }),
    });
    return { finished, retryDelayMs: decision.action === 'retry' ? decision.delayMs : undefined };
  }

  return { prepare, admit, attempt, finish };
}

const GIVE_UP_NOW = Promise.resolve();
/** How long a batch waits once only deliveries to suspect endpoints are left in it. */
const SUSPECT_ONLY_HOLD_MS = 50;

/**
 * The single-delivery job processor (retries, deferrals, replays, test events). Expected outcomes
 * are values; only the last step turns them into BullMQ's language: return (done or dead-lettered),
 * RetryLaterError (retry after a delay), or DelayedError after moveToDelayed (wait without spending
 * an attempt).
 */
export function createDeliveryProcessor(deps: DeliveryProcessorDeps): (job: Job, token?: string) => Promise<FinishedOutcome> {
  const steps = deliverySteps(deps);
  const defer = async (job: Job, data: DeliverJob, retryAtMs: number, reason: DeferReason, token?: string): Promise<never> => {
    await job.moveToDelayed(Math.round(retryAtMs + deps.random() * 1_000), token);
    steps.finish({ kind: 'deferred', job: data, reason });
    throw new DelayedError();
  };

  return async (job, token) => {
    const data = JOBS.deliver.schema.parse(job.data);

    // 1. A delivery that left a batch: its record knows the attempts made, and it may be finished.
    let attemptNo = job.attemptsMade + 1;
    if (data.fromBatch) {
      const [progress] = await deps.recorder.progressOf([data]);
      if (progress && FINISHED.has(progress.status)) return steps.finish({ kind: 'skipped', job: data });
      attemptNo = (progress?.attempts ?? 0) + 1;
      const dueMs = progress?.status === 'retrying' ? (progress.nextAttemptAtMs ?? 0) : 0;
      if (dueMs > deps.nowMs() + 100) {
        await job.moveToDelayed(dueMs, token);
        throw new DelayedError();
      }
    }

    // 2. Find the webhook; drop or dead-letter when there is nothing to send to.
    const prepared = await steps.prepare(data, attemptNo);
    if ('finished' in prepared) return prepared.finished;

    // 3. Breaker and slot: an endpoint that keeps failing or hangs waits in the queue, not in a slot.
    const admitted = await steps.admit(prepared.webhook, GIVE_UP_NOW);
    if (!admitted.ok) return defer(job, data, admitted.retryAtMs, admitted.reason, token);

    // 4. Attempt, then steer the queue.
    const { finished, retryDelayMs } = await steps.attempt(data, prepared.webhook, attemptNo, admitted.started);
    if (retryDelayMs !== undefined) throw new RetryLaterError(retryDelayMs, finished.kind === 'attempted' ? finished.outcome : 'unknown');
    return finished;
  };
}

/** How a batch job run ended. */
export interface BatchSummary {
  deliveries: number;
  attempted: number;
  /** Left the batch as single jobs: retries, deferrals and hand-offs. */
  handedOff: number;
  skipped: number;
}

/**
 * The batch job processor: first attempts of many deliveries, run concurrently within the process's
 * send slots, recorded one by one. A delivery that needs another try leaves the batch as a single
 * job (retry after its delay; deferred by its breaker; still waiting on a slow endpoint when the
 * batch checks). A re-run batch (the worker died, or an unexpected error) first reads each delivery's
 * record and sends only what has not been attempted, so a crash repeats at most what was in flight.
 */
export function createBatchProcessor(deps: DeliveryProcessorDeps): (job: Job) => Promise<BatchSummary> {
  const steps = deliverySteps(deps);

  return async (job) => {
    const { deliveries } = JOBS.deliverBatch.schema.parse(job.data);
    const singles: SingleDelivery[] = [];
    const leave = (data: DeliverJob, delayMs: number) => singles.push({ job: { ...data, fromBatch: true }, delayMs: Math.max(0, delayMs) });
    let todo = deliveries;
    let skipped = 0;

    // 1. A re-run: skip what is finished, re-queue what was waiting for a retry (a no-op if queued).
    if (job.attemptsStarted > 1 || job.attemptsMade > 0) {
      const progress = await deps.recorder.progressOf(deliveries);
      const nowMs = deps.nowMs();
      todo = deliveries.filter((data, i) => {
        const p = progress[i];
        if (p === undefined) return true;
        if (p.status === 'retrying') leave(data, (p.nextAttemptAtMs ?? nowMs) - nowMs);
        else {
          skipped += 1;
          steps.finish({ kind: 'skipped', job: data });
        }
        return false;
      });
    }

    // 2. Every delivery concurrently; the batch waits for them, handing off the ones that hold it up.
    let attempted = 0;
    let giveUpNow: () => void = () => undefined;
    let giveUp = new Promise<void>((resolve) => (giveUpNow = resolve));
    const inflight = new Map<DeliverJob, { startedMs: number; suspect: boolean }>();
    const handedOff = new Set<DeliverJob>();
    let pending = todo.length;
    // Woken whenever a delivery settles or starts or stops waiting, to look again at what holds the batch.
    let wake: () => void = () => undefined;
    const settleOne = (data: DeliverJob) => {
      if (handedOff.has(data)) return;
      pending -= 1;
      wake();
    };
    let waitingFirstContact = 0;
    const onWaiting = (waiting: boolean) => {
      waitingFirstContact += waiting ? 1 : -1;
      wake();
    };
    /** Everything left waits on suspect endpoints: nothing healthy is left to wait for. */
    const onlySuspectLeft = () => {
      let suspectInflight = 0;
      for (const [data, { suspect }] of inflight) if (suspect && !handedOff.has(data)) suspectInflight += 1;
      return pending > 0 && pending === waitingFirstContact + suspectInflight;
    };

    const run = async (data: DeliverJob) => {
      const prepared = await steps.prepare(data, 1);
      if ('finished' in prepared) return;
      const admitted = await steps.admit(prepared.webhook, giveUp, onWaiting);
      if (!admitted.ok) {
        leave(data, admitted.retryAtMs - deps.nowMs());
        steps.finish({ kind: 'deferred', job: data, reason: admitted.reason });
        return;
      }
      inflight.set(data, { startedMs: deps.nowMs(), suspect: admitted.started.suspect });
      attempted += 1;
      wake();
      try {
        const { retryDelayMs } = await steps.attempt(data, prepared.webhook, 1, admitted.started);
        if (retryDelayMs === undefined) return;
        // Handed off while in flight: its single job exists and reads the record when it runs.
        if (!handedOff.has(data)) leave(data, retryDelayMs);
      } finally {
        inflight.delete(data);
      }
    };
    let failure: Error | undefined;
    for (const data of todo) {
      run(data).then(
        () => settleOne(data),
        (error: unknown) => {
          failure ??= error instanceof Error ? error : new Error('delivery step failed', { cause: error });
          settleOne(data);
        },
      );
    }

    let holdStartedMs = deps.nowMs();
    while (pending > 0) {
      // Hold-up check, every suspectHoldMs, or after SUSPECT_ONLY_HOLD_MS once only deliveries to
      // suspect endpoints are left (the healthy rest is done: waiting longer only delays the batch).
      const onlySuspect = onlySuspectLeft();
      const waitMs = Math.max(0, holdStartedMs + (onlySuspect ? Math.min(SUSPECT_ONLY_HOLD_MS, deps.suspectHoldMs) : deps.suspectHoldMs) - deps.nowMs());
      let timer: NodeJS.Timeout | undefined;
      const woke = await new Promise<boolean>((resolve) => {
        wake = () => resolve(true);
        timer = setTimeout(() => resolve(false), waitMs);
      });
      clearTimeout(timer);
      wake = () => undefined;
      if (pending === 0) break;
      if (woke) {
        // Something changed: a hold that no longer applies starts over.
        if (onlySuspect !== onlySuspectLeft()) holdStartedMs = deps.nowMs();
        continue;
      }
      // Deliveries still waiting for an endpoint's first answer give up (deferred); attempts to
      // suspect endpoints past the hold, and any past batchHoldMs, leave as single jobs due after
      // their timeout, while the attempt itself goes on.
      giveUpNow();
      giveUp = new Promise<void>((resolve) => (giveUpNow = resolve));
      const nowMs = deps.nowMs();
      holdStartedMs = nowMs;
      for (const [data, { startedMs, suspect }] of inflight) {
        const holdMs = suspect ? (onlySuspect ? 0 : deps.suspectHoldMs) : deps.batchHoldMs;
        if (nowMs - startedMs < holdMs || handedOff.has(data)) continue;
        settleOne(data);
        handedOff.add(data);
        leave(data, startedMs + deps.deliveryTimeoutMs + 1_000 - nowMs);
      }
    }
    await deps.singles.addSingles(singles);
    // An unexpected error (Redis while recording): re-run the batch; finished deliveries are skipped.
    if (failure !== undefined) throw failure;
    return { deliveries: deliveries.length, attempted, handedOff: singles.length, skipped };
  };
}

/** The signed request of one attempt (DESIGN "What a vendor receives"). */
export function buildRequest(job: DeliverJob, webhook: Webhook, attempt: number, nowMs: number, timeoutMs: number): SendRequest {
  return {
    url: webhook.callbackUrl,
    body: job.body,
    timeoutMs,
    headers: {
      ...signatureHeaders({ webhookId: job.eventId, timestampSec: Math.floor(nowMs / 1000), body: job.body, secrets: signingSecrets(webhook, nowMs) }),
      'x-webhook-event': job.eventType,
      'x-webhook-attempt': String(attempt),
    },
  };
}
