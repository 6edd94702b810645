import { DelayedError, type Job } from 'bullmq';
import { signingSecrets, type Webhook } from '../domain/webhook.js';
import type { Logger } from '../logger.js';
import type { DeferralWrite, DeliveryProgress, DeliveryRecorder, DeliveryStatus } from '../store/delivery-log.js';
import type { EndpointMemory } from '../store/endpoints.js';
import type { WebhookSource } from '../store/webhooks.js';
import { endpointOf, type AttemptHealth, type EndpointBreakers } from './breaker.js';
import { attemptOutcome, decide, type AttemptOutcome, type Decision } from './classify.js';
import type { SendRequest, SendResult } from './http-sender.js';
import { JOBS, type DeliverJob } from './jobs.js';
import type { SingleDelivery } from './queue.js';
import type { SendSlots } from './send-slots.js';
import { signatureHeaders } from './sign.js';
import type { StorageGate } from './storage-gate.js';
import type { DeferralWakeups } from './wakeups.js';

/** What the processors need; the CLI wires the real ones, tests may pass their own clock. */
export interface DeliveryProcessorDeps {
  webhooks: WebhookSource;
  sender: { send(request: SendRequest): Promise<SendResult> };
  recorder: DeliveryRecorder;
  /** Where deliveries that leave a batch (retries, deferrals, hand-offs) go, and how deferred ones are woken. */
  singles: { addSingles(singles: readonly SingleDelivery[]): Promise<void> };
  breakers: EndpointBreakers;
  /** The attempts this process runs at once. */
  slots: SendSlots;
  /** Closed while storage fails: no new sends then (see StorageGate). */
  gate: StorageGate;
  /** Wakes deferred deliveries when their endpoint takes deliveries again. */
  wakeups: Pick<DeferralWakeups, 'register'>;
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

/**
 * Thrown by a batch that stopped sending because storage failed: its job runs again, and the re-run
 * sends only what was not recorded.
 */
export class StorageUnavailableError extends Error {
  override name = 'StorageUnavailableError';
  constructor() {
    super('storage failed during the batch; it runs again and sends only what was not recorded');
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

/** The result recorded for an attempt that came due while its endpoint's circuit was open. */
const CIRCUIT_OPEN: SendResult = {
  kind: 'error',
  errorClass: 'circuit_open',
  message: 'not sent: the endpoint failed lately and its circuit is open; the attempt counts on the retry schedule',
  durationMs: 0,
};

/** An attempt that may start: its slot is held and the breaker knows it (release both with `end`). */
interface StartedAttempt {
  endpoint: string;
  ticket: number;
  suspect: boolean;
}

/**
 * Admission: an attempt may start; or it is deferred (held back without spending an attempt); or it
 * is due past what an open circuit may hold it (record `circuit_open`); or storage is failing (send
 * nothing; the job runs again).
 */
type Admitted =
  | { ok: true; started: StartedAttempt }
  | { ok: false; kind: 'deferred'; endpoint: string; retryAtMs: number; reason: DeferReason }
  | { ok: false; kind: 'circuit_open' }
  | { ok: false; kind: 'storage' };

interface AdmitOptions {
  /** When the retry schedule made this attempt due. */
  dueAtMs: number;
  /** The storage gate's epoch when the job started. */
  epoch: number;
  /** Resolves when a wait for a first contact's answer must give up. */
  giveUp: Promise<void>;
  /** A replay or test event: probe an open circuit now. */
  forceProbe?: boolean;
  onWaiting?: (waiting: boolean) => void;
}

/** What ran: the outcome for metrics, and the delay when the delivery must be tried again. */
interface AttemptEnd {
  finished: FinishedOutcome;
  retryDelayMs: number | undefined;
}

/** Known endpoints remembered per process at most (the endpoint-memory lookups). */
const KNOWN_ENDPOINTS_MAX = 10_000;

/**
 * The steps every delivery shares, whether it runs in a batch or on its own: admission through the
 * storage gate, the endpoint's breaker and a send slot, sign and send, decide, record (one round
 * trip), disable the webhook when it must be, one log line, metrics.
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

  function finish(outcome: FinishedOutcome): FinishedOutcome {
    deps.onOutcome?.(outcome);
    return outcome;
  }

  /** The delivery's webhook, or a finished outcome when there is nothing to send. */
  async function prepare(data: DeliverJob, attempt: number): Promise<{ webhook: Webhook } | { finished: FinishedOutcome }> {
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

  /** Why an attempt that the breaker holds back is deferred, or recorded as `circuit_open` when it is overdue. */
  function notAdmitted(endpoint: string, reason: 'open' | 'probing' | 'slow' | 'first_contact', retryAtMs: number, dueAtMs: number): Admitted {
    if ((reason === 'open' || reason === 'probing') && retryAtMs > dueAtMs + deps.circuitHoldMs) return { ok: false, kind: 'circuit_open' };
    return { ok: false, kind: 'deferred', endpoint, retryAtMs, reason: reason === 'first_contact' ? 'slow' : reason };
  }

  /**
   * Waits for the endpoint's breaker and a send slot. `first_contact` waits in the process for the
   * endpoint's first answer (until `giveUp` resolves); a slot is waited for in turn (healthy
   * endpoints always keep part of the slots, so the wait ends). Everything else is deferred, or
   * recorded as `circuit_open` when an open circuit would hold it past its due time by more than
   * one open period. Nothing is sent while the storage gate is closed, or once it has closed since
   * the job started (its queue lock may have been lost meanwhile).
   */
  async function admit(webhook: Webhook, options: AdmitOptions): Promise<Admitted> {
    const endpoint = endpointFor(webhook.callbackUrl);
    await learn(endpoint);
    let gaveUp = false;
    void options.giveUp.then(() => (gaveUp = true));
    const forceProbe = options.forceProbe ?? false;
    for (;;) {
      if (!deps.gate.allows(options.epoch)) return { ok: false, kind: 'storage' };
      const pre = deps.breakers.admit(endpoint, deps.nowMs(), forceProbe);
      if (!pre.admitted) {
        if (pre.reason !== 'first_contact' || gaveUp) return notAdmitted(endpoint, pre.reason, pre.retryAtMs, options.dueAtMs);
        options.onWaiting?.(true);
        await Promise.race([pre.settled, options.giveUp]);
        options.onWaiting?.(false);
        continue;
      }
      await deps.slots.acquire();
      if (!deps.gate.allows(options.epoch)) {
        deps.slots.release();
        return { ok: false, kind: 'storage' };
      }
      const nowMs = deps.nowMs();
      const admission = deps.breakers.admit(endpoint, nowMs, forceProbe);
      if (!admission.admitted) {
        deps.slots.release();
        continue;
      }
      const suspect = admission.lane === 'suspect';
      if (suspect && !deps.slots.markSuspect()) {
        deps.slots.release();
        return { ok: false, kind: 'deferred', endpoint, retryAtMs: nowMs + 250 + Math.floor(deps.random() * 750), reason: 'slow' };
      }
      return { ok: true, started: { endpoint, ticket: deps.breakers.start(endpoint, nowMs, admission.probe, webhook.id), suspect } };
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
    if (result.kind === 'response') share(started.endpoint);
    // The slot is held until the attempt is recorded: a worker killed at any moment then repeats
    // at most as many attempts as it has slots (sent or answered, but not yet recorded).
    try {
      return await conclude(data, webhook, attemptNo, result, startedMs, endedMs);
    } finally {
      deps.slots.release(started.suspect);
    }
  }

  /** Records an attempt that came due while the endpoint's circuit was open, without sending it. */
  function recordCircuitOpen(data: DeliverJob, webhook: Webhook, attemptNo: number): Promise<AttemptEnd> {
    const nowMs = deps.nowMs();
    return conclude(data, webhook, attemptNo, CIRCUIT_OPEN, nowMs, nowMs);
  }

  /** Decides what follows an attempt, records it, disables the webhook when it must be, logs and counts. */
  async function conclude(data: DeliverJob, webhook: Webhook, attemptNo: number, result: SendResult, startedMs: number, endedMs: number): Promise<AttemptEnd> {
    const decision = decide({ result, attemptsMade: attemptNo, scheduleMs: deps.retryScheduleMs, nowMs: endedMs, random: deps.random });
    const outcome = attemptOutcome(result);
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

  return { prepare, admit, attempt, recordCircuitOpen, finish };
}

const GIVE_UP_NOW = Promise.resolve();
/** How long a batch waits once only deliveries to suspect endpoints are left in it. */
const SUSPECT_ONLY_HOLD_MS = 50;
/** A job that ran more than this before its attempt was due goes back to wait (clock skew between workers). */
const EARLY_TOLERANCE_MS = 100;

/** When the attempt after `progress` is due by the schedule (a deferral does not move it). */
function dueAtOf(data: DeliverJob, progress: DeliveryProgress | undefined, scheduleMs: readonly number[]): number {
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
export function createDeliveryProcessor(deps: DeliveryProcessorDeps): (job: Job, token?: string) => Promise<FinishedOutcome> {
  const steps = deliverySteps(deps);
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
    if (progress && FINISHED.has(progress.status)) return steps.finish({ kind: 'skipped', job: data });
    const attemptNo = (progress?.attempts ?? 0) + 1;
    const dueAtMs = dueAtOf(data, progress, deps.retryScheduleMs);
    if (dueAtMs > deps.nowMs() + EARLY_TOLERANCE_MS) return wait(job, dueAtMs, token);

    // 2. Find the webhook; drop or dead-letter when there is nothing to send to.
    const prepared = await steps.prepare(data, attemptNo);
    if ('finished' in prepared) return prepared.finished;

    // 3. Gate, breaker and slot: an endpoint that keeps failing or hangs waits in the queue, not in a slot.
    const admitted = await steps.admit(prepared.webhook, { dueAtMs, epoch, giveUp: GIVE_UP_NOW, forceProbe: data.manual === true });
    let end: AttemptEnd;
    if (admitted.ok) end = await steps.attempt(data, prepared.webhook, attemptNo, admitted.started);
    else if (admitted.kind === 'circuit_open') end = await steps.recordCircuitOpen(data, prepared.webhook, attemptNo);
    else if (admitted.kind === 'storage') return wait(job, deps.nowMs() + 1_000 + deps.random() * 1_000, token);
    else {
      const retryAtMs = Math.round(admitted.retryAtMs + deps.random() * 1_000);
      await Promise.all([job.moveToDelayed(retryAtMs, token), deps.recorder.recordDeferred([{ job: data, nextAttemptAtMs: retryAtMs, dueAtMs }])]);
      deps.wakeups.register(admitted.endpoint, [data], retryAtMs);
      steps.finish({ kind: 'deferred', job: data, reason: admitted.reason });
      throw new DelayedError();
    }

    // 4. Steer the queue.
    const { finished, retryDelayMs } = end;
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
 * batch checks). A re-run batch (the worker died, storage failed, or an unexpected error) first
 * reads each delivery's record and sends only what has not been attempted, so a crash repeats at
 * most what was in flight.
 */
export function createBatchProcessor(deps: DeliveryProcessorDeps): (job: Job) => Promise<BatchSummary> {
  const steps = deliverySteps(deps);
  const firstDelayMs = deps.retryScheduleMs[0] ?? 0;

  return async (job) => {
    const { deliveries } = JOBS.deliverBatch.schema.parse(job.data);
    const epoch = deps.gate.epoch;
    const singles: SingleDelivery[] = [];
    const leave = (data: DeliverJob, delayMs: number) => singles.push({ job: data, delayMs: Math.max(0, delayMs) });
    const deferred: { data: DeliverJob; endpoint: string; retryAtMs: number; dueAtMs: number }[] = [];
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

    let failure: Error | undefined;
    const run = async (data: DeliverJob) => {
      const prepared = await steps.prepare(data, 1);
      if ('finished' in prepared) return;
      const dueAtMs = data.acceptedAtMs + firstDelayMs;
      const admitted = await steps.admit(prepared.webhook, { dueAtMs, epoch, giveUp, onWaiting });
      let end: AttemptEnd;
      if (admitted.ok) {
        inflight.set(data, { startedMs: deps.nowMs(), suspect: admitted.started.suspect });
        attempted += 1;
        wake();
        try {
          end = await steps.attempt(data, prepared.webhook, 1, admitted.started);
        } finally {
          inflight.delete(data);
        }
      } else if (admitted.kind === 'circuit_open') {
        end = await steps.recordCircuitOpen(data, prepared.webhook, 1);
      } else if (admitted.kind === 'storage') {
        // Not sent: the re-run of this batch sends it.
        failure ??= new StorageUnavailableError();
        return;
      } else {
        leave(data, admitted.retryAtMs - deps.nowMs());
        deferred.push({ data, endpoint: admitted.endpoint, retryAtMs: admitted.retryAtMs, dueAtMs });
        steps.finish({ kind: 'deferred', job: data, reason: admitted.reason });
        return;
      }
      // Handed off while in flight: its single job exists and reads the record when it runs.
      if (end.retryDelayMs !== undefined && !handedOff.has(data)) leave(data, end.retryDelayMs);
    };
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
      // Storage failed since the batch started: it will run again, and it must stay the only owner
      // of its deliveries (a hand-off would make a second one), so it waits for its attempts.
      if (!deps.gate.allows(epoch)) {
        holdStartedMs = deps.nowMs();
        continue;
      }
      // Deliveries still waiting for an endpoint's first answer give up (deferred, and woken as soon
      // as it answers); attempts to suspect endpoints past the hold, and any past batchHoldMs, leave
      // as single jobs due after their timeout, while the attempt itself goes on.
      giveUpNow();
      giveUp = new Promise<void>((resolve) => (giveUpNow = resolve));
      const nowMs = deps.nowMs();
      holdStartedMs = nowMs;
      for (const [data, { startedMs, suspect }] of inflight) {
        const holdMs = suspect ? (onlySuspect ? 0 : deps.suspectHoldMs) : deps.batchHoldMs;
        if (nowMs - startedMs < holdMs || handedOff.has(data)) continue;
        settleOne(data);
        handedOff.add(data);
        const dueMs = startedMs + deps.deliveryTimeoutMs + 1_000;
        leave(data, dueMs - nowMs);
        handOffs.push({ job: data, nextAttemptAtMs: dueMs, dueAtMs: data.acceptedAtMs + firstDelayMs, ifNoRecord: true });
      }
    }
    // Deferred and handed-off deliveries get a record before their single job exists: a re-run of
    // this batch (it failed after this point) then finds them pending and leaves them to that job,
    // instead of sending them a second time beside it.
    const marks = [...deferred.map(({ data, retryAtMs, dueAtMs }) => ({ job: data, nextAttemptAtMs: retryAtMs, dueAtMs })), ...handOffs];
    if (marks.length > 0) await deps.recorder.recordDeferred(marks);
    await deps.singles.addSingles(singles);
    // Only now are the deferred jobs in the queue to be woken.
    const byEndpoint = new Map<string, { refs: DeliverJob[]; untilMs: number }>();
    for (const { data, endpoint, retryAtMs } of deferred) {
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
