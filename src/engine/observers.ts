/**
 * What the engine does with what the delivery stages report beyond metrics (which
 * src/metrics/observers.ts counts): circuit changes logged and shared with the operator views,
 * finished attempts published to the live feed and counted into their webhook's stats. Each is a
 * plain callback the assembly hands to a stage.
 */
import { UNSENT_OUTCOMES } from '../domain/delivery.js';
import type { CircuitChange } from '../delivery/endpoints/breaker.js';
import type { FinishedOutcome } from '../delivery/attempt.js';
import { endpointParts } from '../domain/endpoint.js';
import type { Logger } from '../logger.js';
import type { FeedEntry, RedisAttemptFeed } from '../store/attempt-feed.js';
import type { RedisCircuitLog } from '../store/circuits.js';
import type { EndpointStatsRecorder } from '../store/endpoint-stats.js';
import type { Tracing } from '../domain/trace.js';

/** Logs a circuit's changes (open and close at warn, with the vendor and webhooks behind the endpoint) and shares them with the operator views. */
export function circuitObserver(
  logger: Logger,
  circuits: Pick<RedisCircuitLog, 'changed'>,
  nowMs: () => number,
): (endpoint: string, change: CircuitChange) => void {
  // The open circuits the operator views show; losing one write only hides it there.
  // The views show the receiver origin: they are per webhook, whose vendor they show already.
  const share = (origin: string, change: CircuitChange) => {
    const now = nowMs();
    const view =
      change.state === 'open'
        ? {
            state: 'open' as const,
            reason: change.reason,
            endpoint: origin,
            openedAtMs: now,
            probeAtMs: now + change.openForMs,
          }
        : change.state === 'half_open'
          ? { state: 'half_open' as const, reason: 'probing', endpoint: origin, openedAtMs: now, probeAtMs: now }
          : undefined;
    circuits
      .changed(change.webhookIds, view, now)
      .catch((error: Error) => logger.debug({ err: error.message }, 'circuit state not shared'));
  };
  return (endpoint, change) => {
    const { vendorId, origin } = endpointParts(endpoint);
    share(origin, change);
    const fields = { endpoint: origin, vendorId, webhookIds: change.webhookIds };
    if (change.state === 'open') {
      logger.warn(
        { event: 'circuit.opened', ...fields, reason: change.reason, openForMs: change.openForMs },
        'circuit opened: deliveries to this endpoint are held back, and attempts that come due meanwhile are recorded as circuit_open',
      );
    } else if (change.state === 'closed') {
      logger.warn(
        { event: 'circuit.closed', ...fields },
        'circuit closed: a probe was answered; deliveries to this endpoint flow again',
      );
    } else logger.debug({ event: 'circuit.half_open', ...fields }, 'circuit half-open: probing');
  };
}

/** Publishes every finished attempt to the live feed (`hookline deliveries tail`), which costs nothing while nobody listens. */
export function feedObserver(feed: Pick<RedisAttemptFeed, 'publish' | 'wanted'>): (outcome: FinishedOutcome) => void {
  return (outcome) => {
    if (outcome.kind !== 'attempted' || !feed.wanted()) return;
    const { job } = outcome;
    const entry: FeedEntry = {
      at: new Date(outcome.endedAtMs).toISOString(),
      vendor_id: job.vendorId,
      webhook_id: job.webhookId,
      event_type: job.eventType,
      event_id: job.eventId,
      delivery_id: job.deliveryId,
      attempt: outcome.attempt,
      outcome: outcome.outcome,
      status_code: outcome.statusCode ?? null,
      duration_ms: Math.round(outcome.durationMs),
      decision: outcome.decision,
    };
    feed.publish(entry);
  };
}

/** Counts every finished attempt into its webhook's stats (the store decides what counts as sent). */
export function statsObserver(stats: EndpointStatsRecorder): (outcome: FinishedOutcome) => void {
  return (o) => {
    if (o.kind !== 'attempted') return;
    const { outcome, statusCode, startedAtMs, endedAtMs, durationMs } = o;
    stats.observe({ webhookId: o.job.webhookId, outcome, statusCode, startedAtMs, endedAtMs, durationMs });
  };
}

/**
 * The spans of a delivery's steps that send nothing (sent attempts make their own CLIENT spans):
 * each deferral (`hookline.delivery.deferred`, with its reason), each attempt not sent
 * (`hookline.delivery.not_sent`: circuit open, webhook disabled or paused past the retry window),
 * and a drop (`hookline.delivery.dropped`: its webhook was deleted).
 */
export function tracingObserver(
  tracing: Pick<Tracing, 'note'>,
  nowMs: () => number,
): (outcome: FinishedOutcome) => void {
  return (outcome) => {
    switch (outcome.kind) {
      case 'deferred':
        tracing.note(outcome.job, 'hookline.delivery.deferred', nowMs(), {
          'hookline.deferral.reason': outcome.reason,
        });
        return;
      case 'dropped':
        tracing.note(outcome.job, 'hookline.delivery.dropped', nowMs(), {});
        return;
      case 'attempted':
        if (UNSENT_OUTCOMES.has(outcome.outcome))
          tracing.note(outcome.job, 'hookline.delivery.not_sent', outcome.startedAtMs, {
            'hookline.attempt': outcome.attempt,
            'hookline.outcome': outcome.outcome,
            'hookline.decision': outcome.decision,
          });
        return;
      case 'skipped':
        return;
    }
  };
}

/** Egress-proxy failures logged at most once per this: while it is down, every attempt meets it. */
const EGRESS_PROXY_LOG_EVERY_MS = 10_000;

/**
 * Logs the egress proxy being unreachable at warn, with its address and the socket's error, which
 * the attempts' messages leave out (vendors read those): at most one line per 10 s, saying how many
 * attempts met it since the last line.
 */
export function egressProxyObserver(
  logger: Logger,
  nowMs: () => number,
): (failure: { proxy: string; reason: string }) => void {
  let loggedAtMs = -Infinity;
  let unlogged = 0;
  return ({ proxy, reason }) => {
    unlogged += 1;
    const now = nowMs();
    if (now - loggedAtMs < EGRESS_PROXY_LOG_EVERY_MS) return;
    logger.warn(
      { event: 'delivery.egress_proxy_unreachable', proxy, err: reason, attempts: unlogged },
      'egress proxy unreachable: deliveries and token requests cannot leave (repeats within 10 s are counted in the next line)',
    );
    loggedAtMs = now;
    unlogged = 0;
  };
}
