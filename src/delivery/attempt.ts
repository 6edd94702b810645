import type { Webhook } from '../domain/webhook.js';
import { endpointKey } from '../domain/endpoint.js';
import { privateKeyObject } from '../domain/signing-keys.js';
import { signingSecrets, webhookSigningKeys } from '../domain/webhook.js';
import type { Logger } from '../logger.js';
import type { AttemptOutcome, DeliveryStatus, SentRequest } from '../domain/delivery.js';
import type { DeliveryRecorder } from '../store/delivery-log.js';
import type { EndpointMemory } from '../store/endpoints.js';
import type { SendRateLimiter } from '../store/send-rate.js';
import type { WebhookSource } from '../store/webhooks.js';
import type { EndpointBreakers } from './breaker.js';
import { decide, type Decision } from './classify.js';
import { interpret, type Interpretation } from './interpret.js';
import type { SendRequest, SendResult } from './http-sender.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { SingleDelivery } from './queue.js';
import type { SendSlots } from './send-slots.js';
import { deliveryHeaders } from './sign.js';
import type { EndpointFlow } from './endpoint-flow.js';
import type { StorageGate } from './storage-gate.js';
import type { DeferralWakeups, DeferredRef } from './wakeups.js';
import { pauseHoldEndMs, type PauseHolds } from './pause-holds.js';
import type { HeldJob } from '../store/held-deliveries.js';

/**
 * One delivery attempt, the steps every delivery shares whether it runs in a batch or on its own:
 * prepare (find the webhook), admit (storage gate, breaker, send slot), send (sign and POST),
 * decide, record, and the one log line. The single and batch processors build on these.
 */

/** What the processors need; the composition root (createEngine) wires them, with a clock of its own for tests. */
export interface DeliveryProcessorDeps {
  webhooks: WebhookSource;
  sender: { send(request: SendRequest): Promise<SendResult>; readonly userAgent: string };
  recorder: DeliveryRecorder;
  /** Where deliveries that leave a batch go (retries and hand-offs as single jobs, deferrals parked), and how deferred ones are woken. */
  singles: {
    addSingles(singles: readonly SingleDelivery[]): Promise<void>;
    park(parks: readonly { jobId: string; deliveries: DeliverJob[]; delayMs: number }[]): Promise<void>;
    promote(refs: readonly Pick<DeferredRef, 'webhookId' | 'jobId' | 'parked'>[]): Promise<void>;
  };
  breakers: EndpointBreakers;
  /** The attempts this process runs at once. */
  slots: SendSlots;
  /** Closed while storage fails: no new sends then (see StorageGate). */
  gate: StorageGate;
  /** Wakes deferred deliveries when their endpoint takes deliveries again. */
  wakeups: Pick<DeferralWakeups, 'register'>;
  /** Where deliveries held for their webhook's pause are noted, and released when an enable raced a hold. */
  holds: Pick<PauseHolds, 'hold' | 'release'>;
  /** The shared send windows of webhooks with a `rate_limit_per_second`. */
  sendRate: SendRateLimiter;
  /** Each endpoint's adaptive concurrency limit and Retry-After pause (see endpoint-flow.ts). */
  flow: EndpointFlow;
  /** What workers know about receiver endpoints across processes and restarts; absent: nothing shared. */
  endpointMemory?: EndpointMemory;
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
  /**
   * How long a delivery held back behind an endpoint that has not proven itself (no answer yet, slow
   * lately, or the suspect share of the slots taken) is deferred. The wakeups send the endpoint one
   * of them at a time meanwhile and bring the rest back as soon as it answers in time, so this is
   * only when they come back by themselves (this process gone, or the endpoint never answering).
   * Default twice the delivery timeout plus one open period (the time two contacts and the circuit's
   * first open period take).
   */
  unprovenHoldMs?: number;
  /**
   * How far past the time its schedule made it due an open circuit may hold a delivery back (one
   * open period). Beyond that the due attempt is recorded as failed (`circuit_open`, not sent) and
   * the schedule goes on, so a circuit never stretches a delivery's life past its retry schedule.
   */
  circuitHoldMs: number;
  nowMs: () => number;
  random: () => number;
  /** Called once per finished attempt or drop (metrics). */
  onOutcome?: (outcome: FinishedOutcome) => void;
}

/**
 * Why a delivery was put back without an attempt: its endpoint's breaker (open, probing, slow), its
 * webhook's rate limit, its endpoint's concurrency limit, a pause its endpoint asked for
 * (Retry-After), or its webhook paused by its vendor (held until enabled; see pause-holds.ts).
 */
export type DeferReason = 'open' | 'probing' | 'slow' | 'rate_limited' | 'concurrency' | 'paused' | 'webhook_paused';

/** Why a delivery was dead-lettered without a request: its webhook disabled by the engine, or paused past the delivery's retry window. */
type UnsentOutcome = 'webhook_disabled' | 'paused_expired';

/** How a delivery run ended, for the caller and for metrics. */
export type FinishedOutcome =
  | {
      kind: 'attempted';
      job: DeliverJob;
      outcome: AttemptOutcome | UnsentOutcome;
      decision: Decision['action'];
      durationMs: number;
      /** When the attempt started (the delivery log's `atMs`). */
      startedAtMs: number;
      endedAtMs: number;
      /** The receiver's HTTP status, when it answered. */
      statusCode?: number;
      /** Which attempt of the delivery this was (1 = first). */
      attempt: number;
      /** Set when this attempt disabled the webhook. */
      disabled?: 'gone' | 'failing';
    }
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
const SEND_THREW = { health: 'failed', flow: 'neutral', retryAfterMs: undefined } as const;

/** An attempt that may start: its slot is held and the breaker knows it (release both with `end`). */
interface StartedAttempt {
  endpoint: string;
  ticket: number;
  suspect: boolean;
  /** The endpoint's flow ticket, and the ceiling its limit may grow to. */
  flowTicket: number;
  ceiling: number;
}

/**
 * Admission: an attempt may start; or it is deferred (held back without spending an attempt) until
 * `retryAtMs`, and woken earlier when `wakeOn` (its endpoint) takes deliveries again; or it is due
 * past what an open circuit may hold it (record `circuit_open`); or storage is failing (send
 * nothing; the job runs again). A rate-limited delivery has no `wakeOn`: its endpoint is healthy,
 * and its time is its place in the line for the webhook's tokens.
 */
export type Admitted =
  | { ok: true; started: StartedAttempt }
  | { ok: false; kind: 'deferred'; wakeOn: string | undefined; retryAtMs: number; reason: DeferReason }
  | { ok: false; kind: 'circuit_open' }
  | { ok: false; kind: 'storage' };

export interface AdmitOptions {
  /** When the retry schedule made this attempt due. */
  dueAtMs: number;
  /** The storage gate's epoch when the job started. */
  epoch: number;
  /** Resolves when a wait for a first contact's answer must give up. */
  giveUp: Promise<void>;
  /** A replay or test event: probe an open circuit now. */
  forceProbe?: boolean;
  /**
   * Spreads deliveries the breaker defers over this much past their retry time, so a herd held back
   * behind one endpoint does not come back at one instant (0: not spread).
   */
  deferJitterMs: number;
  /**
   * How long a delivery may wait in the process for room at its endpoint's concurrency limit (a
   * batch: not at all, since every batch a full endpoint holds holds the healthy deliveries of the
   * batches behind it, and the deferral's wakeup brings the delivery back as soon as there is room;
   * a single job 250 ms, rather than going back to the queue at once to find the endpoint full again).
   */
  roomWaitMs: number;
  /**
   * The caller registers a deferral behind an endpoint with the wakeups (batches and single jobs
   * do): one behind an unproven endpoint is then held for long (`unprovenHoldMs`), the wakeups
   * bringing it back. Without (a FIFO line's head), it looks again when the attempt in flight has
   * ended, or in 0.25 to 1 s when only the suspect share of the slots was taken.
   */
  wokenByWakeups: boolean;
  onWaiting?: (waiting: boolean) => void;
}

/** What ran: the outcome for metrics, and the delay when the delivery must be tried again. */
export interface AttemptEnd {
  finished: FinishedOutcome;
  retryDelayMs: number | undefined;
}

/**
 * When a delivery deferred for its endpoint's concurrency limit looks again at the latest (plus up to
 * as much at random): the wakeups bring it back sooner, as soon as the endpoint has room.
 */
const CONCURRENCY_RETRY_MS = 1_000;

/** How often a delivery waiting only for the worker's slots at its endpoint looks again by itself. */
const ROOM_RECHECK_MS = 250;

/** Known endpoints remembered per process at most (the endpoint-memory lookups). */
const KNOWN_ENDPOINTS_MAX = 10_000;

/**
 * The steps every delivery shares, whether it runs in a batch or on its own: admission through the
 * storage gate, the endpoint's breaker and a send slot, sign and send, decide, record (one round
 * trip), disable the webhook when it must be, one log line, metrics.
 */
export function deliverySteps(deps: DeliveryProcessorDeps) {
  const endpoints = new Map<string, string>();
  const endpointFor = (webhook: Webhook) => {
    const vendorUrl = `${webhook.vendorId} ${webhook.callbackUrl}`;
    let endpoint = endpoints.get(vendorUrl);
    if (endpoint === undefined) {
      if (endpoints.size >= 10_000) endpoints.clear();
      endpoint = endpointKey(webhook.vendorId, webhook.callbackUrl);
      endpoints.set(vendorUrl, endpoint);
    }
    return endpoint;
  };

  // Lookups in the shared endpoint memory, once per endpoint; and the endpoints it is known to hold
  // (learnt from it, or written to it by this process).
  const lookups = new Map<string, Promise<void>>();
  const shared = new Set<string>();
  /** Learns, once per endpoint, whether another worker (or this one before a restart) saw it answer. */
  function learn(endpoint: string): Promise<void> | undefined {
    const memory = deps.endpointMemory;
    if (memory === undefined || deps.breakers.hasAnswered(endpoint)) return undefined;
    let lookup = lookups.get(endpoint);
    if (lookup === undefined) {
      if (lookups.size >= KNOWN_ENDPOINTS_MAX) lookups.clear();
      lookup = memory.answeredLately(endpoint).then(
        (answered) => {
          if (!answered) return;
          deps.breakers.markAnswered(endpoint);
          shared.add(endpoint);
        },
        // Unknown for now (storage failing): a first contact as without the memory; asked again later.
        () => void lookups.delete(endpoint),
      );
      lookups.set(endpoint, lookup);
    }
    return lookup;
  }
  /** After an answer: tell other workers, once per endpoint and process, unless they told us. */
  function share(endpoint: string): void {
    const memory = deps.endpointMemory;
    if (memory === undefined || shared.has(endpoint)) return;
    if (shared.size >= KNOWN_ENDPOINTS_MAX) shared.clear();
    shared.add(endpoint);
    memory.rememberAnswered(endpoint, deps.nowMs()).catch(() => shared.delete(endpoint));
  }

  /**
   * The one wide line of an attempt (`delivery.attempted`): at info when it delivered, at warn when
   * it failed, dead-lettered the delivery or disabled the webhook.
   */
  function logAttempt(data: DeliverJob, fields: { attempt: number; outcome: string; decision: string } & Record<string, unknown>): void {
    const line = {
      event: 'delivery.attempted',
      eventId: data.eventId,
      eventType: data.eventType,
      webhookId: data.webhookId,
      deliveryId: data.deliveryId,
      ...fields,
    };
    if (fields.decision === 'delivered') deps.logger.info(line, 'delivery.attempted');
    else deps.logger.warn(line, 'delivery.attempted');
  }

  function finish(outcome: FinishedOutcome): FinishedOutcome {
    deps.onOutcome?.(outcome);
    return outcome;
  }

  /** Dead-letters a delivery without sending it (its record says why), logs and counts it. */
  async function deadUnsent(data: DeliverJob, attempt: number, outcome: UnsentOutcome, error: string, why: Record<string, unknown>): Promise<FinishedOutcome> {
    const atMs = deps.nowMs();
    await deps.recorder.recordAttempt({ job: data, attempt: { attempt, atMs, outcome, durationMs: 0, error }, status: 'dead' });
    logAttempt(data, { attempt, outcome, durationMs: 0, decision: 'dead', ...why });
    return finish({ kind: 'attempted', job: data, attempt, outcome, decision: 'dead', durationMs: 0, startedAtMs: atMs, endedAtMs: deps.nowMs() });
  }

  /**
   * The delivery's webhook; or a finished outcome when there is nothing to send; or, while its
   * webhook is paused by its vendor, when its hold ends (see pause-holds.ts).
   */
  async function prepare(data: DeliverJob, attempt: number): Promise<{ webhook: Webhook } | { finished: FinishedOutcome } | { heldUntilMs: number }> {
    let webhook: Webhook | undefined;
    try {
      webhook = await deps.webhooks.getById(data.webhookId);
    } catch (error) {
      deps.gate.close();
      throw error;
    }
    // A deleted webhook's deliveries are dropped.
    if (!webhook) {
      await deps.recorder.recordDropped(data, deps.nowMs());
      deps.logger.info({ event: 'delivery.dropped', eventId: data.eventId, webhookId: data.webhookId, deliveryId: data.deliveryId }, 'delivery.dropped');
      return { finished: finish({ kind: 'dropped', job: data }) };
    }
    // A paused webhook's deliveries wait, unsent and without spending attempts, to the end of their retry window.
    if (webhook.disabled?.reason === 'paused') {
      const heldUntilMs = pauseHoldEndMs(data, deps.retryScheduleMs);
      if (deps.nowMs() < heldUntilMs) return { heldUntilMs };
      const error = `not sent: the webhook was paused past the end of the delivery's retry window (${new Date(heldUntilMs).toISOString()})`;
      return { finished: await deadUnsent(data, attempt, 'paused_expired', error, { pausedAtMs: webhook.disabled.atMs }) };
    }
    // A webhook the engine disabled (410 Gone, sustained failure): its deliveries go straight to the
    // dead letters, replayable once re-enabled.
    if (webhook.disabled) {
      const error = `webhook disabled (${webhook.disabled.reason})`;
      return { finished: await deadUnsent(data, attempt, 'webhook_disabled', error, { disabledReason: webhook.disabled.reason }) };
    }
    return { webhook };
  }

  /**
   * After the delayed jobs of a hold exist (or a FIFO line's hold is set): reads the webhook again,
   * past any cached copy, and when it is no longer paused (an enable came meanwhile, or its
   * deletion), brings the hold back at once (see pause-holds.ts for why this closes the race).
   */
  async function recheckHold(webhookId: string, jobs: readonly HeldJob[]): Promise<void> {
    const webhook = await deps.webhooks.getFresh(webhookId);
    if (webhook?.disabled?.reason !== 'paused') await deps.holds.release(webhookId, jobs);
  }

  const unprovenHoldMs = deps.unprovenHoldMs ?? 2 * deps.deliveryTimeoutMs + deps.circuitHoldMs;

  /**
   * Why an attempt that the breaker holds back is deferred, or recorded as `circuit_open` when it is
   * overdue. Behind an unproven endpoint (a first contact in flight, or slow lately) it is deferred
   * for the hold, woken by the wakeups as soon as the endpoint answers in time.
   */
  function notAdmitted(endpoint: string, reason: 'open' | 'probing' | 'slow' | 'first_contact', retryAtMs: number, options: AdmitOptions): Admitted {
    if ((reason === 'open' || reason === 'probing') && retryAtMs > options.dueAtMs + deps.circuitHoldMs) return { ok: false, kind: 'circuit_open' };
    const held = reason !== 'open' && reason !== 'probing' && options.wokenByWakeups;
    const heldUntilMs = held ? Math.max(retryAtMs, deps.nowMs() + unprovenHoldMs) : retryAtMs;
    const spreadAtMs = Math.round(heldUntilMs + deps.random() * options.deferJitterMs);
    return { ok: false, kind: 'deferred', wakeOn: endpoint, retryAtMs: spreadAtMs, reason: reason === 'first_contact' ? 'slow' : reason };
  }

  /**
   * A send token of a rate-limited webhook (one round trip; none for an unlimited one), taken last,
   * with the slot held and the breaker's attempt started, so that the send follows it at once: a
   * token taken long before its send could let sends bunch up past the limit. Undefined: the send
   * may go; else why not.
   */
  async function rateLimited(webhook: Webhook, nowMs: () => number): Promise<Admitted | undefined> {
    if (webhook.rateLimitPerSecond === undefined) return undefined;
    let grant: Awaited<ReturnType<SendRateLimiter['take']>>;
    try {
      grant = await deps.sendRate.take(webhook.id, webhook.rateLimitPerSecond);
    } catch {
      // Storage fails: nothing is sent until it answers (the job runs again).
      deps.gate.close();
      return { ok: false, kind: 'storage' };
    }
    return grant.sent ? undefined : { ok: false, kind: 'deferred', wakeOn: undefined, retryAtMs: nowMs() + grant.retryInMs, reason: 'rate_limited' };
  }

  /**
   * Waits for the endpoint's breaker and a send slot. `first_contact` waits in the process for the
   * endpoint's first answer (until `giveUp` resolves, and only while that contact has been in flight
   * less than `suspectHoldMs`: past that it is likely hanging); a slot is waited for in turn (healthy
   * endpoints always keep part of the slots, so the wait ends). Everything else is deferred, or
   * recorded as `circuit_open` when an open circuit would hold it past its due time by more than
   * one open period. A rate-limited webhook's delivery then takes a place in its send window, or is
   * deferred to its place in the line (`rate_limited`, no attempt spent). Nothing is sent while the
   * storage gate is closed, or once it has closed since the job started (its queue lock may have
   * been lost meanwhile). The endpoint's flow control comes before the slot: a delivery to an
   * endpoint paused by a Retry-After is deferred (`paused`) to the pause's end; one to an endpoint
   * at its concurrency limit waits in the process for room like a first contact for its answer
   * (holding no slot) for at most `roomWaitMs`, and is deferred (`concurrency`) after that.
   */
  async function admit(webhook: Webhook, options: AdmitOptions): Promise<Admitted> {
    const endpoint = endpointFor(webhook);
    await Promise.all([learn(endpoint), deps.flow.learn(endpoint)]);
    const ceiling = Math.min(webhook.maxConcurrency ?? deps.slots.total, deps.slots.total);
    let gaveUp = false;
    void options.giveUp.then(() => (gaveUp = true));
    const forceProbe = options.forceProbe ?? false;
    const roomWaitEndMs = deps.nowMs() + options.roomWaitMs;
    for (;;) {
      if (!deps.gate.allows(options.epoch)) return { ok: false, kind: 'storage' };
      const pre = deps.breakers.admit(endpoint, deps.nowMs(), forceProbe);
      if (!pre.admitted) {
        // A contact unanswered for longer than a batch may wait is not worth waiting for any more.
        if (pre.reason !== 'first_contact' || gaveUp || deps.nowMs() - pre.contactStartedMs >= deps.suspectHoldMs)
          return notAdmitted(endpoint, pre.reason, pre.retryAtMs, options);
        options.onWaiting?.(true);
        await Promise.race([pre.settled, options.giveUp]);
        options.onWaiting?.(false);
        continue;
      }
      const flow = deps.flow.tryStart(endpoint, ceiling);
      if (!flow.started) {
        const spreadMs = deps.random() * Math.max(1_000, options.deferJitterMs);
        if (flow.reason === 'paused')
          return { ok: false, kind: 'deferred', wakeOn: undefined, retryAtMs: Math.round(flow.untilMs + spreadMs), reason: 'paused' };
        // An endpoint held only by the worker's own slots (it never pushed back, no max_concurrency)
        // is waited for as a slot is, however long (looking again every ROOM_RECHECK_MS in case a
        // wakeup went to a delivery that no longer needed it): deferring it would only add queue
        // round trips.
        const bySlotsOnly = ceiling >= deps.slots.total && deps.flow.limitOf(endpoint) >= ceiling;
        const waitMs = bySlotsOnly ? ROOM_RECHECK_MS : roomWaitEndMs - deps.nowMs();
        if (waitMs <= 0)
          return {
            ok: false,
            kind: 'deferred',
            wakeOn: endpoint,
            retryAtMs: Math.round(deps.nowMs() + CONCURRENCY_RETRY_MS + spreadMs),
            reason: 'concurrency',
          };
        await deps.flow.waitForRoom(endpoint, waitMs);
        continue;
      }
      const notStarted = (suspect = false) => {
        deps.flow.cancel(endpoint, flow.ticket);
        deps.slots.release(suspect);
      };
      await deps.slots.acquire();
      if (!deps.gate.allows(options.epoch)) {
        notStarted();
        return { ok: false, kind: 'storage' };
      }
      const nowMs = deps.nowMs();
      const admission = deps.breakers.admit(endpoint, nowMs, forceProbe);
      if (!admission.admitted) {
        notStarted();
        continue;
      }
      const suspect = admission.lane === 'suspect';
      if (suspect && !deps.slots.markSuspect()) {
        // The suspect share is taken: the wakeups send this endpoint a contact when a suspect slot frees.
        notStarted();
        const heldMs = options.wokenByWakeups ? unprovenHoldMs + deps.random() * Math.max(1_000, options.deferJitterMs) : 250 + deps.random() * 750;
        const retryAtMs = Math.round(nowMs + heldMs);
        return { ok: false, kind: 'deferred', wakeOn: endpoint, retryAtMs, reason: 'slow' };
      }
      const ticket = deps.breakers.start(endpoint, nowMs, admission.probe, webhook.id);
      // Started before the token's round trip, so that deliveries racing for the same endpoint meanwhile
      // see it in flight (a first contact stays one); a refused one is taken back as if never started.
      const limited = await rateLimited(webhook, deps.nowMs);
      if (limited !== undefined) {
        deps.breakers.cancel(endpoint, ticket);
        notStarted(suspect);
        return limited;
      }
      return { ok: true, started: { endpoint, ticket, suspect, flowTicket: flow.ticket, ceiling } };
    }
  }

  /** Signs, sends, decides and records one admitted attempt; always gives the slot back. */
  async function attempt(data: DeliverJob, webhook: Webhook, attemptNo: number, started: StartedAttempt): Promise<AttemptEnd> {
    // One instant for both: the attempt is recorded at startedMs, and signed with its whole seconds,
    // so the delivery log rebuilds the exact webhook-timestamp from the record.
    const startedMs = deps.nowMs();
    const request = buildRequest(data, webhook, attemptNo, startedMs, deps.deliveryTimeoutMs);
    let result: SendResult;
    try {
      result = await deps.sender.send(request);
    } catch (error) {
      // send() reports failures as values; an exception is a bug, but must not leak the slot.
      deps.flow.end(started.endpoint, started.flowTicket, SEND_THREW, started.ceiling);
      deps.breakers.finish(started.endpoint, started.ticket, SEND_THREW.health, deps.nowMs());
      deps.slots.release(started.suspect);
      throw error;
    }
    const endedMs = deps.nowMs();
    const answer = interpret(result, endedMs);
    deps.flow.end(started.endpoint, started.flowTicket, answer, started.ceiling);
    deps.breakers.finish(started.endpoint, started.ticket, answer.health, endedMs);
    if (answer.answered) share(started.endpoint);
    // The slot is held until the attempt is recorded: a worker killed at any moment then repeats
    // at most as many attempts as it has slots (sent or answered, but not yet recorded).
    try {
      return await conclude(data, webhook, attemptNo, result, answer, startedMs, endedMs, sentRequest(request, deps.sender.userAgent));
    } finally {
      deps.slots.release(started.suspect);
    }
  }

  /** Records an attempt that came due while the endpoint's circuit was open, without sending it. */
  function recordCircuitOpen(data: DeliverJob, webhook: Webhook, attemptNo: number): Promise<AttemptEnd> {
    const nowMs = deps.nowMs();
    return conclude(data, webhook, attemptNo, CIRCUIT_OPEN, interpret(CIRCUIT_OPEN, nowMs), nowMs, nowMs);
  }

  /** Decides what follows an attempt, records it, disables the webhook when it must be, logs and counts. */
  async function conclude(
    data: DeliverJob,
    webhook: Webhook,
    attemptNo: number,
    result: SendResult,
    answer: Interpretation,
    startedMs: number,
    endedMs: number,
    sent?: SentRequest,
  ): Promise<AttemptEnd> {
    const decision = decide({ answer, attemptsMade: attemptNo, scheduleMs: deps.retryScheduleMs, random: deps.random });
    const { outcome } = answer;
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
          ...(sent === undefined ? {} : { sent }),
        },
        status: STATUS_OF[decision.action],
        ...(decision.action === 'retry' ? { nextAttemptAtMs: endedMs + decision.delayMs } : {}),
      }));
    } catch (error) {
      // An attempt that cannot be recorded will be made again: stop sending until storage answers.
      deps.gate.close();
      throw error;
    }
    let disabled: 'gone' | 'failing' | undefined;
    if (decision.action === 'disable') {
      if (await deps.webhooks.disable(webhook.id, 'gone')) disabled = 'gone';
    } else if (decision.action !== 'delivered' && failingSinceMs !== undefined && endedMs - failingSinceMs >= deps.sustainedFailureMs) {
      if (await deps.webhooks.disable(webhook.id, 'failing')) disabled = 'failing';
    }

    logAttempt(data, {
      attempt: attemptNo,
      outcome,
      status: result.kind === 'response' ? result.status : undefined,
      durationMs: Math.round(result.durationMs),
      decision: decision.action,
      ...(decision.action === 'retry' ? { retryInMs: decision.delayMs } : {}),
      ...(disabled === undefined ? {} : { webhookDisabled: disabled }),
    });
    const finished = finish({
      kind: 'attempted',
      job: data,
      outcome,
      decision: decision.action,
      durationMs: result.durationMs,
      startedAtMs: startedMs,
      endedAtMs: endedMs,
      attempt: attemptNo,
      ...(result.kind === 'response' ? { statusCode: result.status } : {}),
      ...(disabled === undefined ? {} : { disabled }),
    });
    return { finished, retryDelayMs: decision.action === 'retry' ? decision.delayMs : undefined };
  }

  return { prepare, recheckHold, admit, attempt, recordCircuitOpen, finish };
}

/** The signed request of one attempt (DESIGN "What a vendor receives"). */
function buildRequest(job: DeliverJob, webhook: Webhook, attempt: number, nowMs: number, timeoutMs: number): SendRequest {
  return {
    url: webhook.callbackUrl,
    body: job.body,
    timeoutMs,
    headers: deliveryHeaders({
      webhookId: job.eventId,
      eventType: job.eventType,
      attempt,
      timestampSec: Math.floor(nowMs / 1000),
      body: job.body,
      secrets: signingSecrets(webhook, nowMs),
      signingKeys: webhookSigningKeys(webhook, nowMs).map((key) => privateKeyObject(key.privateKey)),
    }),
  };
}

/** What the attempt record keeps of a request so its headers can be shown exactly (about 100 bytes of JSON). */
function sentRequest(request: SendRequest, userAgent: string): SentRequest {
  let host = '';
  try {
    host = new URL(request.url).host;
  } catch {
    // Never stored (registration checks URLs); the sender reports such a URL as a network error.
  }
  const entries = request.headers['webhook-signature']?.split(' ') ?? [];
  const keySignatures = entries.filter((entry) => entry.startsWith('v1a,')).length;
  return {
    host,
    bodyBytes: Buffer.byteLength(request.body),
    signatures: entries.length - keySignatures,
    ...(keySignatures === 0 ? {} : { keySignatures }),
    userAgent,
  };
}
