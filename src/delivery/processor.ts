import { DelayedError, type Job } from 'bullmq';
import { signingSecrets, type Webhook } from '../domain/webhook.js';
import type { Logger } from '../logger.js';
import type { DeliveryRecorder, DeliveryStatus } from '../store/delivery-log.js';
import type { WebhookSource } from '../store/webhooks.js';
import { endpointOf, type EndpointBreakers } from './breaker.js';
import { attemptOutcome, decide, type AttemptOutcome, type Decision } from './classify.js';
import type { SendRequest, SendResult } from './http-sender.js';
import { JOBS, type DeliverJob } from './jobs.js';
import { signatureHeaders } from './sign.js';

/** What the processor needs; the CLI wires the real ones, tests may pass their own clock. */
export interface DeliveryProcessorDeps {
  webhooks: WebhookSource;
  sender: { send(request: SendRequest): Promise<SendResult> };
  recorder: DeliveryRecorder;
  breakers: EndpointBreakers;
  logger: Logger;
  /** Delay before each attempt; its length is the number of attempts. */
  retryScheduleMs: readonly number[];
  deliveryTimeoutMs: number;
  /** A webhook whose attempts have all failed for this long is disabled. */
  sustainedFailureMs: number;
  nowMs: () => number;
  random: () => number;
  /** Called once per finished attempt or drop (metrics). */
  onOutcome?: (outcome: FinishedOutcome) => void;
}

/** How a delivery job run ended, for the caller and for metrics. */
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
  | { kind: 'deferred'; job: DeliverJob; reason: 'open' | 'probing' | 'slow' };

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

/** Failures that say something about the endpoint's health (not a 4xx the receiver chose to send). */
function isUnhealthy(result: SendResult): boolean {
  if (result.kind === 'error') return result.errorClass !== 'ssrf_blocked';
  return result.status >= 500 || result.status === 429;
}

const STATUS_OF: Record<Decision['action'], Exclude<DeliveryStatus, 'pending' | 'replayed' | 'dropped'>> = {
  delivered: 'delivered',
  retry: 'retrying',
  dead: 'dead',
  disable: 'dead',
};

/**
 * The delivery job processor. Expected outcomes are values; only the last step turns them into
 * BullMQ's language: return (done or dead-lettered), RetryLaterError (retry after a delay), or
 * DelayedError after moveToDelayed (circuit open: wait without spending an attempt).
 */
export function createDeliveryProcessor(deps: DeliveryProcessorDeps): (job: Job, token?: string) => Promise<FinishedOutcome> {
  return async (job, token) => {
    // 1. Parse the payload and find the webhook (a deleted webhook's deliveries are dropped).
    const data = JOBS.deliver.schema.parse(job.data);
    const webhook = await deps.webhooks.getById(data.webhookId);
    if (!webhook) {
      await deps.recorder.recordDropped(data, deps.nowMs());
      deps.logger.info({ event: 'delivery.dropped', eventId: data.eventId, webhookId: data.webhookId, deliveryId: data.deliveryId }, 'delivery.dropped');
      return finish({ kind: 'dropped', job: data });
    }

    // 2. A disabled webhook's deliveries go straight to the dead letters, replayable once re-enabled.
    const attempt = job.attemptsMade + 1;
    if (webhook.disabled) {
      await deps.recorder.recordAttempt({
        job: data,
        attempt: { attempt, atMs: deps.nowMs(), outcome: 'webhook_disabled', durationMs: 0, error: `webhook disabled (${webhook.disabled.reason})` },
        status: 'dead',
      });
      return finish({ kind: 'attempted', job: data, outcome: 'webhook_disabled', decision: 'dead', durationMs: 0, endedAtMs: deps.nowMs() });
    }

    // 3. Circuit breaker: an endpoint that keeps failing or hangs waits in the queue, not in a slot.
    const endpoint = endpointOf(webhook.callbackUrl);
    const admission = deps.breakers.admit(endpoint, deps.nowMs());
    if (!admission.admitted) {
      const jitterMs = Math.floor(deps.random() * 1_000);
      await job.moveToDelayed(admission.retryAtMs + jitterMs, token);
      deps.onOutcome?.({ kind: 'deferred', job: data, reason: admission.reason });
      throw new DelayedError();
    }

    // 4. Sign and send.
    const startedMs = deps.nowMs();
    const ticket = deps.breakers.start(endpoint, startedMs);
    let result: SendResult;
    try {
      result = await deps.sender.send(buildRequest(data, webhook, attempt, startedMs, deps.deliveryTimeoutMs));
    } catch (error) {
      // send() reports failures as values; an exception is a bug, but must not leak the slot.
      deps.breakers.finish(endpoint, ticket, false, deps.nowMs());
      throw error;
    }
    const endedMs = deps.nowMs();
    deps.breakers.finish(endpoint, ticket, !isUnhealthy(result), endedMs);

    // 5. Decide, record the attempt (one round trip), and disable the webhook when it must be.
    const decision = decide({ result, attemptsMade: attempt, scheduleMs: deps.retryScheduleMs, nowMs: endedMs, random: deps.random });
    const outcome = attemptOutcome(result);
    const { failingSinceMs } = await deps.recorder.recordAttempt({
      job: data,
      attempt: {
        attempt,
        atMs: startedMs,
        outcome,
        durationMs: result.durationMs,
        ...(result.kind === 'response' ? { statusCode: result.status, responseSnippet: result.bodySnippet } : { error: result.message }),
      },
      status: STATUS_OF[decision.action],
      ...(decision.action === 'retry' ? { nextAttemptAtMs: endedMs + decision.delayMs } : {}),
    });
    let disabled: 'gone' | 'failing' | undefined;
    if (decision.action === 'disable') {
      if (await deps.webhooks.disable(webhook.id, 'gone')) disabled = 'gone';
    } else if (decision.action !== 'delivered' && failingSinceMs !== undefined && endedMs - failingSinceMs >= deps.sustainedFailureMs) {
      if (await deps.webhooks.disable(webhook.id, 'failing')) disabled = 'failing';
    }

    // 6. One wide log line per attempt.
    deps.logger.info(
      {
        event: 'delivery.attempted',
        eventId: data.eventId,
        eventType: data.eventType,
        webhookId: data.webhookId,
        deliveryId: data.deliveryId,
        attempt,
        outcome,
        status: result.kind === 'response' ? result.status : undefined,
        durationMs: Math.round(result.durationMs),
        decision: decision.action,
        ...(decision.action === 'retry' ? { retryInMs: decision.delayMs } : {}),
        ...(disabled === undefined ? {} : { webhookDisabled: disabled }),
      },
      'delivery.attempted',
    );

    // 7. Steer the queue.
    const finished = finish({
      kind: 'attempted',
      job: data,
      outcome,
      decision: decision.action,
      durationMs: result.durationMs,
      endedAtMs: endedMs,
      ...(disabled === undefined ? {} : { disabled }),
    });
    if (decision.action === 'retry') throw new RetryLaterError(decision.delayMs, outcome);
    return finished;
  };

  function finish(outcome: FinishedOutcome): FinishedOutcome {
    deps.onOutcome?.(outcome);
    return outcome;
  }
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
