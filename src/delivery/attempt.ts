import type { Webhook } from '../domain/webhook.js';
import { privateKeyObject } from '../domain/signing-keys.js';
import { retryScheduleOf, signingSecrets, webhookSigningKeys } from '../domain/webhook.js';
import { formatDurationMs } from '../lib/duration.js';
import type { Logger } from '../logger.js';
import type { AttemptOutcome, AttemptRecord, DeliveryStatus, SentRequest } from '../domain/delivery.js';
import type { AttemptWrite, DeliveryRecorder } from '../store/delivery-log.js';
import type { WebhookSource } from '../store/webhooks.js';
import { decide, type Decision } from './classify.js';
import { interpret, type Interpretation } from './interpret.js';
import type { SendRequest, SendResult } from './outbound/http-sender.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { SingleDelivery } from './queue.js';
import { deliveryHeaders } from './outbound/sign.js';
import type { StorageGate } from './storage-gate.js';
import { addReceiverCredentials, receiverCredentialFacts, sendAuthorized } from './outbound/receiver-request.js';
import type { ReceiverTokens } from './outbound/receiver-tokens.js';
import type { DeferralWakeups, DeferredRef } from './endpoints/wakeups.js';
import { Lease, type AdmitOptions, type EndpointAdmission } from './endpoints/admission.js';
import type { DeferReason, NotAdmitted } from './endpoints/deferral.js';
import { pauseHoldEndMs, type PauseHolds } from './pause-holds.js';
import type { HeldJob } from '../store/held-deliveries.js';
import { CappedMap } from '../lib/capped-map.js';
import {
  deliveryTraceContext,
  parseTraceparent,
  traceparentOf,
  type AttemptEnd,
  type AttemptSpan,
  type TraceContext,
  type Tracing,
} from '../domain/trace.js';

/**
 * One delivery run, the steps every delivery shares whether it runs in a batch, on its own or at the
 * head of a FIFO line: prepare (find the webhook), admit (endpoints/admission.ts), send (sign and
 * POST), conclude (decide, record, the one log line), as top-level functions over the processors'
 * deps. `runDelivery` returns one DeliveryRun value; each processor only translates it.
 */

/** What the processors need; the composition root (createEngine) wires them, with a clock of its own for tests. */
export interface DeliveryProcessorDeps {
  webhooks: WebhookSource;
  sender: { send(request: SendRequest): Promise<SendResult>; readonly userAgent: string };
  /** OAuth2 tokens of webhooks whose auth needs one; absent: such webhooks are sent without (tests). */
  receiverTokens?: ReceiverTokens;
  recorder: DeliveryRecorder;
  /** Where deliveries that leave a batch go (retries and hand-offs as single jobs, deferrals parked), and how deferred ones are woken. */
  singles: {
    addSingles(singles: readonly SingleDelivery[]): Promise<void>;
    park(parks: readonly { jobId: string; deliveries: DeliverJob[]; delayMs: number }[]): Promise<void>;
    promote(refs: readonly Pick<DeferredRef, 'webhookId' | 'jobId' | 'parked'>[]): Promise<void>;
  };
  /** Whether an attempt may start, and the lease of what it holds (see endpoints/admission.ts). */
  admission: Pick<EndpointAdmission, 'admit'>;
  /** Closed while storage fails: no new sends then (see StorageGate). */
  gate: StorageGate;
  /** Wakes deferred deliveries when their endpoint takes deliveries again. */
  wakeups: Pick<DeferralWakeups<never>, 'register'>;
  /** Where deliveries held for their webhook's pause are noted, and released when an enable raced a hold. */
  holds: Pick<PauseHolds, 'hold' | 'release'>;
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
  /** Attempt spans (trace export on); absent: none are made. */
  tracing?: Pick<Tracing, 'startAttempt'>;
}

/** Why a delivery was dead-lettered without a request: its webhook disabled by the engine, or paused past the delivery's retry window. */
type UnsentOutcome = 'webhook_disabled' | 'paused_expired' | 'max_age_expired';

/**
 * What one attempt came to, made once from the run's result: the delivery log's record, the
 * attempt's log line, the metrics and the other observers, and its span all read this one value.
 */
interface AttemptFacts {
  kind: 'attempted';
  job: DeliverJob;
  /** Which attempt of the delivery this was (1 = first). */
  attempt: number;
  outcome: AttemptOutcome | UnsentOutcome;
  decision: Decision['action'];
  durationMs: number;
  /** When the attempt started (the delivery log's `atMs`; its whole seconds are the signed `webhook-timestamp`). */
  startedAtMs: number;
  endedAtMs: number;
  /** The receiver's HTTP status and the start of its answer, when it answered. */
  statusCode?: number;
  responseSnippet?: string;
  /** Why it failed, when no answer came (or nothing was sent). */
  error?: string;
  /** What the request carried, when one was made (see SentRequest). */
  sent?: SentRequest;
  /** The trace the attempt belongs to. */
  traceId?: string;
  /** When the decision is a retry: in how long. */
  retryInMs?: number;
  /** Set when this attempt disabled the webhook (known once it is recorded). */
  disabled?: 'gone' | 'failing';
}

/** How a delivery run ended, for the caller and for metrics. */
export type FinishedOutcome =
  | AttemptFacts
  | { kind: 'dropped'; job: DeliverJob }
  | { kind: 'deferred'; job: DeliverJob; reason: DeferReason }
  /** A delivery found already finished (a batch re-run, a hand-off whose attempt succeeded). */
  | { kind: 'skipped'; job: DeliverJob };

const STATUS_OF: Record<Decision['action'], Exclude<DeliveryStatus, 'pending' | 'replayed' | 'dropped'>> = {
  delivered: 'delivered',
  retry: 'retrying',
  dead: 'dead',
  disable: 'dead',
};

/** Statuses after which nothing more is sent. */
export const FINISHED: ReadonlySet<DeliveryStatus> = new Set(['delivered', 'dead', 'dropped', 'replayed']);

/** The result recorded for an attempt that came due while its endpoint's circuit was open. */
const CIRCUIT_OPEN: SendResult = {
  kind: 'error',
  errorClass: 'circuit_open',
  message: 'not sent: the endpoint failed lately and its circuit is open; the attempt counts on the retry schedule',
  durationMs: 0,
};

/** How a send that threw (a bug: send() reports failures as values) ends its attempt at the endpoint: a failure that says nothing about capacity. */
const SEND_THREW = { health: 'failed', flow: 'neutral', retryAfterMs: undefined, answered: false } as const;

/** A run that made its attempt (or dead-lettered or dropped the delivery): the outcome, and the delay when it must be tried again. */
export interface Concluded {
  kind: 'concluded';
  finished: FinishedOutcome;
  retryDelayMs: number | undefined;
}

/** A run held back because its webhook is paused by its vendor: nothing sent until `heldUntilMs` or the enable (see pause-holds.ts). */
export interface Held {
  kind: 'held';
  heldUntilMs: number;
}

/**
 * What one delivery run came to, the one value the single, batch and FIFO processors translate into
 * BullMQ, a park or a line: an attempt made (or the delivery finished unsent), a hold for a paused
 * webhook, a deferral admission planned (see endpoints/deferral.ts), or storage failing (nothing
 * sent; the job runs again).
 */
export type DeliveryRun = Concluded | Held | Extract<NotAdmitted, { kind: 'deferred' | 'storage' }>;

/**
 * Told when an admitted attempt starts (with whether it holds a suspect slot) and when it has ended:
 * one per batch, so a batch knows what holds it up without a closure per delivery.
 */
export interface SendTracker {
  started(job: DeliverJob, suspect: boolean): void;
  ended(job: DeliverJob): void;
  /**
   * The attempt was made and is about to be recorded: whether, delivered, it may go to the delivery
   * log's journal (see AttemptWrite.journal); nothing may hand it off from then on.
   */
  recording?(job: DeliverJob): boolean;
}

/** Admission's options for the run, and who is told when its attempt starts and ends. */
export interface RunOptions extends AdmitOptions {
  tracker?: SendTracker;
}

/**
 * One delivery run: prepare (find the webhook), admit (endpoints/admission.ts), send (sign, POST,
 * settle the lease), conclude (decide, record, log). Every delivery, in a batch, a single job or a
 * FIFO line, takes these steps and nothing else; only what its processor does with the run differs.
 */
export async function runDelivery(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  attemptNo: number,
  options: RunOptions,
): Promise<DeliveryRun> {
  const prepared = await prepare(deps, data, attemptNo);
  return 'kind' in prepared ? prepared : admitAndSend(deps, data, prepared, attemptNo, options);
}

/** The run after prepare: admission, then the attempt (sent, or recorded as `circuit_open`), or why not. */
export async function admitAndSend(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  webhook: Webhook,
  attemptNo: number,
  options: RunOptions,
): Promise<DeliveryRun> {
  // Awaited only when admission had to wait: most deliveries are admitted synchronously. A last
  // attempt is always sent (see AdmitOptions.lastAttempt).
  let admitted = deps.admission.admit(
    webhook,
    attemptNo >= retryScheduleOf(webhook, deps.retryScheduleMs).length ? { ...options, lastAttempt: true } : options,
  );
  if (admitted instanceof Promise) admitted = await admitted;
  if (admitted instanceof Lease) {
    const { tracker } = options;
    if (tracker === undefined) return send(deps, data, webhook, attemptNo, admitted);
    tracker.started(data, admitted.slot === 'suspect');
    try {
      return await send(deps, data, webhook, attemptNo, admitted, tracker);
    } finally {
      tracker.ended(data);
    }
  }
  if (admitted.kind === 'circuit_open') return recordCircuitOpen(deps, data, webhook, attemptNo);
  if (admitted.kind !== 'deferred') return admitted;
  // Held back past its max_age: it comes back when that passes, to be dead-lettered then.
  const deadlineMs = maxAgeDeadlineMs(data, webhook);
  const deferred = admitted.retryAtMs > deadlineMs ? { ...admitted, retryAtMs: deadlineMs } : admitted;
  return webhook.priority === 'high' ? { ...deferred, high: true } : deferred;
}

/** Reports a finished run (metrics, the attempt feed, endpoint stats) and returns it. */
export function finish(deps: Pick<DeliveryProcessorDeps, 'onOutcome'>, outcome: FinishedOutcome): FinishedOutcome {
  deps.onOutcome?.(outcome);
  return outcome;
}

/**
 * The one wide line of an attempt (`delivery.attempted`): at warn when it failed, dead-lettered the
 * delivery or disabled the webhook; at debug when it delivered. A delivered attempt is in the
 * delivery log already (the API, the portal, `hookline deliveries tail`), and its line cost about
 * 10 µs of CPU and an eighth of the engine's allocation per delivery (see docs/operations.md#logs).
 */
function logAttempt(logger: Logger, facts: AttemptFacts, why?: Record<string, unknown>): void {
  const { job } = facts;
  const line = {
    event: 'delivery.attempted',
    eventId: job.eventId,
    eventType: job.eventType,
    webhookId: job.webhookId,
    deliveryId: job.deliveryId,
    attempt: facts.attempt,
    outcome: facts.outcome,
    status: facts.statusCode,
    durationMs: Math.round(facts.durationMs),
    decision: facts.decision,
    ...(facts.retryInMs === undefined ? {} : { retryInMs: facts.retryInMs }),
    ...(facts.disabled === undefined ? {} : { webhookDisabled: facts.disabled }),
    ...(facts.traceId === undefined ? {} : { traceId: facts.traceId }),
    ...why,
  };
  if (facts.decision === 'delivered') logger.debug(line, 'delivery.attempted');
  else logger.warn(line, 'delivery.attempted');
}

/** The delivery log's write of an attempt: its record (what vendors see of it), the delivery's new status and next attempt. */
function attemptWrite(facts: AttemptFacts, journal: boolean): AttemptWrite {
  const attempt: AttemptRecord = {
    attempt: facts.attempt,
    atMs: facts.startedAtMs,
    outcome: facts.outcome,
    durationMs: facts.durationMs,
    ...(facts.statusCode === undefined ? {} : { statusCode: facts.statusCode, responseSnippet: facts.responseSnippet }),
    ...(facts.error === undefined ? {} : { error: facts.error }),
    ...(facts.sent === undefined ? {} : { sent: facts.sent }),
    ...(facts.traceId === undefined ? {} : { traceId: facts.traceId }),
  };
  return {
    job: facts.job,
    attempt,
    status: STATUS_OF[facts.decision],
    ...(facts.retryInMs === undefined ? {} : { nextAttemptAtMs: facts.endedAtMs + facts.retryInMs }),
    ...(journal ? { journal } : {}),
  };
}

/** How an attempt's span ends: its outcome, decision and answer; `unrecorded` when storage failed and it will be made again. */
function spanEnd(facts: AttemptFacts, recorded: boolean): AttemptEnd {
  return {
    outcome: facts.outcome,
    decision: recorded ? facts.decision : 'unrecorded',
    ...(facts.statusCode !== undefined ? { statusCode: facts.statusCode } : { error: facts.error }),
    ...(recorded && facts.retryInMs !== undefined ? { retryInMs: facts.retryInMs } : {}),
    endMs: facts.endedAtMs,
  };
}

/** Dead-letters a delivery without sending it (its record says why), logs and counts it. */
async function deadUnsent(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  attempt: number,
  outcome: UnsentOutcome,
  error: string,
  why: Record<string, unknown>,
): Promise<Concluded> {
  const atMs = deps.nowMs();
  const facts: AttemptFacts = {
    kind: 'attempted',
    job: data,
    attempt,
    outcome,
    decision: 'dead',
    durationMs: 0,
    startedAtMs: atMs,
    endedAtMs: atMs,
    error,
  };
  await deps.recorder.recordAttempt(attemptWrite(facts, false));
  logAttempt(deps.logger, facts, why);
  return { kind: 'concluded', finished: finish(deps, facts), retryDelayMs: undefined };
}

/**
 * Why a delivery was dropped, unsent: its webhook was deleted (found at its run), or the event log
 * no longer held its body when its first attempt came to read it (the event was erased, its
 * webhook deleted with its log, or the installation's retention passed while it waited).
 */
export type DropReason = 'webhook_deleted' | 'event_gone';

/**
 * Ends a delivery unsent and without a dead letter, with one log line; recorded as dropped when its
 * webhook was deleted. An event gone from the log leaves no record: an erasure must not see a record
 * of the erased event come back, and a retention that passed keeps nothing.
 */
export async function drop(deps: DeliveryProcessorDeps, data: DeliverJob, reason: DropReason): Promise<Concluded> {
  if (reason === 'webhook_deleted') await deps.recorder.recordDropped(data, deps.nowMs());
  deps.logger.info(
    {
      event: 'delivery.dropped',
      reason,
      eventId: data.eventId,
      webhookId: data.webhookId,
      deliveryId: data.deliveryId,
    },
    'delivery.dropped',
  );
  return { kind: 'concluded', finished: finish(deps, { kind: 'dropped', job: data }), retryDelayMs: undefined };
}

/**
 * The delivery's webhook; or the run's end when there is nothing to send (dropped, dead-lettered);
 * or, while its webhook is paused by its vendor, when its hold ends (see pause-holds.ts).
 */
export async function prepare(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  attempt: number,
): Promise<Webhook | Concluded | Held> {
  let webhook: Webhook | undefined;
  try {
    webhook = await deps.webhooks.getById(data.webhookId);
  } catch (error) {
    deps.gate.close();
    throw error;
  }
  // A deleted webhook's deliveries are dropped.
  if (!webhook) return drop(deps, data, 'webhook_deleted');
  // Past the webhook's max_age, whatever held the delivery: dead-lettered unsent, its state gone stale.
  const deadlineMs = maxAgeDeadlineMs(data, webhook);
  if (deps.nowMs() >= deadlineMs) {
    const maxAgeMs = deadlineMs - data.acceptedAtMs;
    const error = `not sent: older than the webhook's max_age (${formatDurationMs(maxAgeMs)} after acceptance)`;
    return deadUnsent(deps, data, attempt, 'max_age_expired', error, { maxAgeMs });
  }
  // A paused webhook's deliveries wait, unsent and without spending attempts, to the end of their
  // retry window (or their max_age, when that comes first).
  if (webhook.disabled?.reason === 'paused') {
    const heldUntilMs = Math.min(pauseHoldEndMs(data, retryScheduleOf(webhook, deps.retryScheduleMs)), deadlineMs);
    if (deps.nowMs() < heldUntilMs) return { kind: 'held', heldUntilMs };
    const error = `not sent: the webhook was paused past the end of the delivery's retry window (${new Date(heldUntilMs).toISOString()})`;
    return deadUnsent(deps, data, attempt, 'paused_expired', error, { pausedAtMs: webhook.disabled.atMs });
  }
  // A webhook the engine disabled (410 Gone, sustained failure): its deliveries go straight to the
  // dead letters, replayable once re-enabled.
  if (webhook.disabled) {
    const error = `webhook disabled (${webhook.disabled.reason})`;
    return deadUnsent(deps, data, attempt, 'webhook_disabled', error, { disabledReason: webhook.disabled.reason });
  }
  return webhook;
}

/**
 * After the delayed jobs of a hold exist (or a FIFO line's hold is set): reads the webhook again,
 * past any cached copy, and when it is no longer paused (an enable came meanwhile, or its
 * deletion), brings the hold back at once (see pause-holds.ts for why this closes the race).
 */
export async function recheckHold(
  deps: DeliveryProcessorDeps,
  webhookId: string,
  jobs: readonly HeldJob[],
): Promise<void> {
  const webhook = await deps.webhooks.getFresh(webhookId);
  if (webhook?.disabled?.reason !== 'paused') await deps.holds.release(webhookId, jobs);
}

/** Signs, sends, decides and records one admitted attempt; always ends its lease. */
async function send(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  webhook: Webhook,
  attemptNo: number,
  lease: Lease,
  tracker?: SendTracker,
): Promise<Concluded> {
  try {
    // One instant for both: the attempt is recorded at startedMs, and signed with its whole seconds,
    // so the delivery log rebuilds the exact webhook-timestamp from the record.
    const startedMs = deps.nowMs();
    const request = buildRequest(data, webhook, attemptNo, startedMs, deps.deliveryTimeoutMs);
    const span = deps.tracing?.startAttempt({
      job: data,
      attempt: attemptNo,
      url: webhook.callbackUrl,
      startMs: startedMs,
    });
    const trace = attemptTrace(data, webhook, span);
    if (trace !== undefined && webhook.propagateTrace) {
      request.headers.traceparent = traceparentOf(trace);
      // The producer's state of its trace goes with it (W3C Trace Context), as it came.
      if (data.tracestate !== undefined && trace.traceId === carriedTraceId(data))
        request.headers.tracestate = data.tracestate;
    }
    let result: SendResult;
    try {
      result = await sendAuthorized(deps.sender, deps.receiverTokens, webhook, request);
    } catch (error) {
      // send() reports failures as values; an exception is a bug, but must not leave the endpoint waiting.
      lease.settle(SEND_THREW, deps.nowMs());
      span?.end({ outcome: 'network', decision: 'unrecorded', error: (error as Error).message, endMs: deps.nowMs() });
      throw error;
    }
    const endedMs = deps.nowMs();
    const answer = interpret(result, endedMs);
    lease.settle(answer, endedMs);
    const facts = attemptFacts(deps, data, webhook, attemptNo, result, answer, startedMs, endedMs, {
      // An `auth` failure before any token came sent nothing: no request to show. (One whose token
      // was refused, and no new one came, did send that request: sendAuthorized set its header.)
      sent:
        result.kind === 'error' && result.errorClass === 'auth' && request.headers.authorization === undefined
          ? undefined
          : { ...sentRequest(request, deps.sender.userAgent), ...receiverCredentialFacts(webhook, request) },
      traceId: trace?.traceId,
    });
    // The slot is held until the attempt is recorded: a worker killed at any moment then repeats
    // at most as many attempts as it has slots (sent or answered, but not yet recorded).
    let recorded = false;
    try {
      const concluded = await conclude(deps, facts, tracker?.recording?.(data) === true);
      recorded = true;
      return concluded;
    } finally {
      // Unrecorded: storage failed, and the attempt will be made again.
      span?.end(spanEnd(facts, recorded));
    }
  } finally {
    lease.end();
  }
}

/** Records an attempt that came due while the endpoint's circuit was open, without sending it. */
function recordCircuitOpen(
  deps: DeliveryProcessorDeps,
  data: DeliverJob,
  webhook: Webhook,
  attemptNo: number,
): Promise<Concluded> {
  const nowMs = deps.nowMs();
  return conclude(
    deps,
    attemptFacts(deps, data, webhook, attemptNo, CIRCUIT_OPEN, interpret(CIRCUIT_OPEN, nowMs), nowMs, nowMs, {}),
    false,
  );
}

/** An attempt's facts (see AttemptFacts) from what the send came to, with what follows it decided. */
function attemptFacts(
  deps: Pick<DeliveryProcessorDeps, 'retryScheduleMs' | 'random'>,
  data: DeliverJob,
  webhook: Webhook,
  attemptNo: number,
  result: SendResult,
  answer: Interpretation,
  startedMs: number,
  endedMs: number,
  request: { sent?: SentRequest | undefined; traceId?: string | undefined },
): AttemptFacts {
  const decision = withinMaxAge(
    decide({
      answer,
      attemptsMade: attemptNo,
      scheduleMs: retryScheduleOf(webhook, deps.retryScheduleMs),
      random: deps.random,
    }),
    maxAgeDeadlineMs(data, webhook) - endedMs,
  );
  return {
    kind: 'attempted',
    job: data,
    attempt: attemptNo,
    outcome: answer.outcome,
    decision: decision.action,
    durationMs: result.durationMs,
    startedAtMs: startedMs,
    endedAtMs: endedMs,
    ...(result.kind === 'response'
      ? { statusCode: result.status, responseSnippet: result.bodySnippet }
      : { error: result.message }),
    ...(request.sent === undefined ? {} : { sent: request.sent }),
    ...(request.traceId === undefined ? {} : { traceId: request.traceId }),
    ...(decision.action === 'retry' ? { retryInMs: decision.delayMs } : {}),
  };
}

/** When a delivery passes its webhook's max_age (Infinity without one): counted from its acceptance (a replay's own). */
function maxAgeDeadlineMs(data: DeliverJob, webhook: Webhook): number {
  const maxAgeMs = webhook.retry?.maxAgeMs;
  return maxAgeMs === undefined ? Number.POSITIVE_INFINITY : data.acceptedAtMs + maxAgeMs;
}

/**
 * A retry due after the webhook's max_age (`leftMs` from the attempt's end) is made when the max_age
 * passes instead: that run finds the delivery expired and dead-letters it, unsent, as
 * `max_age_expired` (prepare), so it is a dead letter when its max_age says, not at its next
 * retry's time.
 */
function withinMaxAge(decision: Decision, leftMs: number): Decision {
  if (decision.action !== 'retry' || decision.delayMs <= leftMs) return decision;
  return { action: 'retry', delayMs: Math.max(0, Math.ceil(leftMs)) };
}

/**
 * Records an attempt (`journal`: it may go to the delivery log's journal, see AttemptWrite),
 * disables the webhook when it must be, logs and counts it.
 */
async function conclude(deps: DeliveryProcessorDeps, facts: AttemptFacts, journal: boolean): Promise<Concluded> {
  let failingSinceMs: number | undefined;
  try {
    ({ failingSinceMs } = await deps.recorder.recordAttempt(attemptWrite(facts, journal)));
  } catch (error) {
    // An attempt that cannot be recorded will be made again: stop sending until storage answers.
    deps.gate.close();
    throw error;
  }
  const disabled = await disableIfDue(deps, facts, failingSinceMs);
  if (disabled !== undefined) facts.disabled = disabled;
  logAttempt(deps.logger, facts);
  return { kind: 'concluded', finished: finish(deps, facts), retryDelayMs: facts.retryInMs };
}

/** Disables the webhook after a 410 Gone, or once its attempts have all failed for `sustainedFailureMs`; why, when this call did it. */
async function disableIfDue(
  deps: DeliveryProcessorDeps,
  { job: { webhookId }, decision, endedAtMs }: AttemptFacts,
  failingSinceMs: number | undefined,
): Promise<'gone' | 'failing' | undefined> {
  if (decision === 'disable') return (await deps.webhooks.disable(webhookId, 'gone')) ? 'gone' : undefined;
  if (decision === 'delivered' || failingSinceMs === undefined || endedAtMs - failingSinceMs < deps.sustainedFailureMs)
    return undefined;
  return (await deps.webhooks.disable(webhookId, 'failing')) ? 'failing' : undefined;
}

/**
 * The trace an attempt is part of: its span's (export on); else the delivery's carried context, as
 * it came (export off); else, for a webhook that asked for `traceparent`, one derived from the
 * delivery (the same trace for all its attempts). Undefined: the attempt has no trace.
 */
function attemptTrace(data: DeliverJob, webhook: Webhook, span: AttemptSpan | undefined): TraceContext | undefined {
  if (span !== undefined) return span.context;
  const carried = data.traceparent === undefined ? undefined : parseTraceparent(data.traceparent);
  if (carried !== undefined || !webhook.propagateTrace) return carried;
  return deliveryTraceContext(data.deliveryId);
}

/** The trace id of the context a delivery carries, if it carries one. */
function carriedTraceId(data: DeliverJob): string | undefined {
  return data.traceparent === undefined ? undefined : parseTraceparent(data.traceparent)?.traceId;
}

/** The signed request of one attempt (docs/receiving-webhooks.md "What a vendor receives"). */
function buildRequest(
  job: DeliverJob,
  webhook: Webhook,
  attempt: number,
  nowMs: number,
  timeoutMs: number,
): SendRequest {
  // Encoded once: the signatures are made of these bytes, and the sender writes them as they are.
  const body = Buffer.from(job.body, 'utf8');
  return addReceiverCredentials(
    {
      url: webhook.callbackUrl,
      body,
      timeoutMs,
      headers: deliveryHeaders({
        webhookId: job.eventId,
        eventType: job.eventType,
        attempt,
        timestampSec: Math.floor(nowMs / 1000),
        body,
        secrets: signingSecrets(webhook, nowMs),
        signingKeys: webhookSigningKeys(webhook, nowMs).map((key) => privateKeyObject(key.privateKey)),
      }),
    },
    webhook,
  );
}

/** The Host header of each callback URL sent to lately: parsing a URL per attempt cost about 1.4 % of a delivery's CPU. */
const hostOfUrl = new CappedMap<string, string>(10_000);

function hostOf(url: string): string {
  let host = hostOfUrl.get(url);
  if (host === undefined) {
    try {
      host = new URL(url).host;
    } catch {
      // Never stored (registration checks URLs); the sender reports such a URL as a network error.
      host = '';
    }
    hostOfUrl.set(url, host);
  }
  return host;
}

/** What the attempt record keeps of a request so its headers can be shown exactly (about 100 bytes of JSON). */
function sentRequest(request: SendRequest, userAgent: string): SentRequest {
  const host = hostOf(request.url);
  const entries = request.headers['webhook-signature']?.split(' ') ?? [];
  const keySignatures = entries.filter((entry) => entry.startsWith('v1a,')).length;
  return {
    host,
    bodyBytes: typeof request.body === 'string' ? Buffer.byteLength(request.body) : request.body.length,
    signatures: entries.length - keySignatures,
    ...(keySignatures === 0 ? {} : { keySignatures }),
    userAgent,
    ...(request.headers.traceparent === undefined ? {} : { traceparent: request.headers.traceparent }),
    ...(request.headers.tracestate === undefined ? {} : { tracestate: request.headers.tracestate }),
  };
}
