import type { Job } from 'bullmq';
import { newId } from '../domain/ids.js';
import type { Logger } from '../logger.js';
import type { EngineDisabledReason, TransitionListener, WebhookTransition } from '../store/webhooks.js';
import { decide } from './classify.js';
import { interpret } from './interpret.js';
import type { SendRequest, SendResult } from './outbound/http-sender.js';
import { JOBS, type OperationalWebhookJob } from './jobs.js';
import type { DeliveryQueues } from './queue.js';
import { deliveryHeaders } from './outbound/sign.js';
import { RetryLaterError } from './signals.js';

/**
 * Operational webhooks: what the engine tells the operator's platform (HOOKLINE_OPERATIONAL_WEBHOOK_URL)
 * about vendors' webhooks, so it can tell the vendor. `webhook.disabled` when the engine disables a
 * webhook (410 Gone, or every delivery failing for the sustained-failure window); `webhook.recovered`
 * when such a webhook is enabled again, by its vendor (PATCH, the portal) or an operator. The store's
 * compare-and-set tells each transition once, so one transition is one message however many workers
 * raced to it; the message is queued, then signed and sent like a delivery and retried on the
 * delivery schedule (at least once: a worker killed mid-send sends it again, under the same id).
 */

/** The body, in the payload shape Standard Webhooks recommends: type, timestamp, data. Never a secret. */
export interface OperationalWebhookPayload {
  type: OperationalWebhookJob['type'];
  /** When the transition happened (ISO 8601). */
  timestamp: string;
  data: {
    webhook_id: string;
    vendor_id: string;
    event_type: string;
    callback_url: string;
    /** Why the engine disabled the webhook: `gone` (the receiver answered 410) or `failing` (sustained failure). */
    reason: EngineDisabledReason;
    disabled_at: string;
    /** webhook.recovered only: when it was enabled again. */
    recovered_at?: string;
  };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** The queued message of one transition: its exact body under a new message id (the `webhook-id` of every attempt). */
export function operationalWebhookJob(transition: WebhookTransition): OperationalWebhookJob {
  const { webhook } = transition;
  const common = {
    webhook_id: webhook.id,
    vendor_id: webhook.vendorId,
    event_type: webhook.eventType,
    callback_url: webhook.callbackUrl,
    reason: transition.reason,
  };
  const payload: OperationalWebhookPayload =
    transition.kind === 'disabled'
      ? {
          type: 'webhook.disabled',
          timestamp: iso(transition.atMs),
          data: { ...common, disabled_at: iso(transition.atMs) },
        }
      : {
          type: 'webhook.recovered',
          timestamp: iso(transition.atMs),
          data: { ...common, disabled_at: iso(transition.disabledAtMs), recovered_at: iso(transition.atMs) },
        };
  return {
    id: newId(),
    type: payload.type,
    webhookId: webhook.id,
    vendorId: webhook.vendorId,
    body: JSON.stringify(payload),
  };
}

/**
 * The store's transition listener: queues one operational webhook per transition. A failure to queue
 * is logged (`operational_webhook.failed`, stage `queue`) and not thrown: the transition itself is
 * stored, and the request or attempt that made it must not fail for its notice.
 */
export function operationalWebhookQueuer(
  queues: Pick<DeliveryQueues, 'addOperationalWebhook'>,
  logger: Logger,
): TransitionListener {
  return async (transition) => {
    const job = operationalWebhookJob(transition);
    try {
      await queues.addOperationalWebhook(job);
    } catch (error) {
      logger.error(
        {
          event: 'operational_webhook.failed',
          stage: 'queue',
          messageId: job.id,
          type: job.type,
          webhookId: job.webhookId,
          err: (error as Error).message,
        },
        'operational_webhook.failed: not queued; the platform is not told of this change',
      );
    }
  };
}

export interface OperationalProcessorDeps {
  sender: { send(request: SendRequest): Promise<SendResult> };
  /** The operator's receiver and the whsec_ secret that signs for it. */
  target: { url: string; secret: string };
  /** The delivery schedule: delay before each attempt; its length is the number of attempts. */
  retryScheduleMs: readonly number[];
  timeoutMs: number;
  logger: Logger;
  nowMs: () => number;
  random: () => number;
}

/** The receiver's origin, for logs: a path or query may hold a token of the operator's. */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(invalid URL)';
  }
}

/**
 * The operational queue's processor: signs one message with the operational secret (the headers of
 * every delivery) and sends it through the delivery sender, SSRF guard included. A 2xx ends it; any
 * other answer retries on the delivery schedule, Retry-After honoured, until the schedule runs out
 * (a 410 ends it at once: the receiver said the address is gone). One log line per attempt:
 * `operational_webhook.sent` or `operational_webhook.failed`.
 */
export function createOperationalProcessor(deps: OperationalProcessorDeps): (job: Job) => Promise<void> {
  const target = originOf(deps.target.url);
  return async (job) => {
    const message = JOBS.operationalWebhook.schema.parse(job.data);
    const attempt = job.attemptsMade + 1;
    const result = await deps.sender.send({
      url: deps.target.url,
      body: message.body,
      timeoutMs: deps.timeoutMs,
      headers: deliveryHeaders({
        webhookId: message.id,
        eventType: message.type,
        attempt,
        timestampSec: Math.floor(deps.nowMs() / 1000),
        body: message.body,
        secrets: [deps.target.secret],
      }),
    });
    const answer = interpret(result, deps.nowMs());
    const decision = decide({ answer, attemptsMade: attempt, scheduleMs: deps.retryScheduleMs, random: deps.random });
    const line = {
      messageId: message.id,
      type: message.type,
      webhookId: message.webhookId,
      vendorId: message.vendorId,
      target,
      attempt,
      outcome: answer.outcome,
      status: result.kind === 'response' ? result.status : undefined,
      durationMs: Math.round(result.durationMs),
    };
    if (decision.action === 'delivered') {
      deps.logger.info({ event: 'operational_webhook.sent', ...line }, 'operational_webhook.sent');
      return;
    }
    const retryInMs = decision.action === 'retry' ? decision.delayMs : undefined;
    deps.logger.warn(
      {
        event: 'operational_webhook.failed',
        ...line,
        ...(result.kind === 'error' ? { err: result.message } : {}),
        willRetry: retryInMs !== undefined,
        retryInMs,
      },
      retryInMs === undefined ? 'operational_webhook.failed: giving up' : 'operational_webhook.failed: retrying',
    );
    if (retryInMs !== undefined) throw new RetryLaterError(retryInMs, line.outcome);
  };
}
