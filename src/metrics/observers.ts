import { UNSENT_OUTCOMES } from '../domain/delivery.js';
import type { CircuitChange } from '../delivery/endpoints/breaker.js';
import type { ConnectionKind } from '../delivery/outbound/connector.js';
import type { FinishedOutcome } from '../delivery/attempt.js';
import type { FlowEvent } from '../delivery/endpoints/flow.js';
import type { IngestBatchSummary } from '../ingest/ingest.js';
import type { ProjectionSummary } from '../ingest/read-model-projector.js';
import type { StreamDeadLetterCause } from '../ingest/stream-source.js';
import type { Logger } from '../logger.js';
import { initialiseSeries, type Metrics } from './metrics.js';

/** Sets the build-info gauge and shows every few-valued series at zero before its first event, as a process starts. */
export function seriesAtStart(metrics: Metrics, version: string): void {
  metrics.buildInfo.set({ version }, 1);
  initialiseSeries(metrics);
}

/** Counts each admin API request by its route pattern (never the raw URL, whose ids would make the label unbounded) and times it. */
export function requestObserver(
  metrics: Pick<Metrics, 'httpRequests' | 'httpDuration'>,
): (request: { route: string; method: string; status: number; durationMs: number }) => void {
  return ({ route, method, status, durationMs }) => {
    metrics.httpRequests.inc({ route, method, status: String(status) });
    metrics.httpDuration.observe({ route, method }, durationMs / 1000);
  };
}

/**
 * Counts an ingested batch and, for a stream batch, writes its one log line (`ingest.batch`); an
 * HTTP batch's counts are in its request's line, so that a request writes one line.
 */
export function ingestObserver(metrics: Metrics, logger: Logger): (summary: IngestBatchSummary) => void {
  return (summary) => {
    for (const { eventType, result } of summary.outcomes)
      metrics.eventsIngested.inc({ event_type: eventType, source: summary.source, result });
    metrics.ingestBatchDuration.observe({ source: summary.source }, summary.durationMs / 1000);
    if (summary.filtered > 0) metrics.deliveriesFiltered.inc(summary.filtered);
    if (summary.source === 'http') return;
    logger.info(
      {
        event: 'ingest.batch',
        source: summary.source,
        events: summary.outcomes.length,
        accepted: summary.accepted,
        duplicates: summary.duplicates,
        rejected: summary.rejected,
        deliveries: summary.deliveries,
        filtered: summary.filtered,
        durationMs: Math.round(summary.durationMs),
      },
      'ingest.batch',
    );
  };
}

/** Counts each ingest stream entry set aside in the dead-letter stream (the entry's own log line is the source's). */
export function streamDeadLetterObserver(metrics: Metrics): (cause: StreamDeadLetterCause) => void {
  return (cause) => metrics.ingestStreamDeadLetters.inc({ cause });
}

/** Times each projected entry from its append to its changes being visible, and counts the malformed ones left out. */
export function projectionObserver(metrics: Metrics): (summary: ProjectionSummary) => void {
  return (summary) => {
    for (const delayMs of summary.delaysMs) metrics.readModelDelay.observe(delayMs / 1_000);
    if (summary.entriesSkipped > 0) metrics.readModelEntriesSkipped.inc(summary.entriesSkipped);
  };
}

/** Turns each finished delivery run into counters and histograms. */
export function deliveryObserver(metrics: Metrics): (outcome: FinishedOutcome) => void {
  return (o) => {
    const eventType = o.job.eventType;
    if (o.kind === 'skipped') return;
    if (o.kind === 'deferred') return void metrics.deliveriesDeferred.inc({ reason: o.reason });
    if (o.kind === 'dropped') return void metrics.deliveriesFinished.inc({ event_type: eventType, outcome: 'dropped' });
    metrics.deliveryAttempts.inc({ event_type: eventType, outcome: o.outcome });
    if (!UNSENT_OUTCOMES.has(o.outcome)) metrics.attemptDuration.observe({ outcome: o.outcome }, o.durationMs / 1000);
    if (o.outcome === 'ssrf_blocked') metrics.ssrfBlocked.inc();
    if (o.disabled) metrics.webhooksDisabled.inc({ reason: o.disabled });
    if (o.decision === 'retry') metrics.deliveryRetries.inc({ event_type: eventType });
    else if (o.decision === 'delivered') {
      metrics.deliveriesFinished.inc({ event_type: eventType, outcome: 'delivered' });
      metrics.deliveryLag.observe({ event_type: eventType }, Math.max(0, o.endedAtMs - o.job.acceptedAtMs) / 1000);
    } else {
      metrics.deliveriesFinished.inc({ event_type: eventType, outcome: 'dead_lettered' });
      metrics.deadLetters.inc({ event_type: eventType });
    }
  };
}

/** Counts circuit transitions (the gauge of open circuits is read at scrape time). */
export function breakerObserver(metrics: Metrics): (endpoint: string, change: CircuitChange) => void {
  return (_endpoint, change) => metrics.circuitTransitions.inc({ state: change.state });
}

/** Counts each connection the sender opens to a receiver by how it was made. */
export function connectionObserver(metrics: Metrics): (kind: ConnectionKind) => void {
  return (kind) => metrics.connectionsOpened.inc({ kind });
}

/** Counts the OAuth2 token requests made for receivers, by outcome. */
export function receiverTokenObserver(metrics: Metrics): (outcome: 'ok' | 'error') => void {
  return (outcome) => metrics.receiverTokenRequests.inc({ outcome });
}

/** Shows whether delivery sends are paused because storage stopped answering (the storage gate's state). */
export function storageGateObserver(metrics: Metrics): (open: boolean) => void {
  return (open) => metrics.sendsPaused.set(open ? 0 : 1);
}

/** Counts the send-rate limiter's answers: sent, or deferred because the webhook's rate was reached. */
export function sendRateObserver(metrics: Metrics): (sent: boolean) => void {
  return (sent) => metrics.rateLimitChecks.inc({ result: sent ? 'sent' : 'deferred' });
}

/** Counts concurrency-limit decreases (and the limits they reach) and Retry-After pauses. */
export function flowObserver(metrics: Metrics): (event: FlowEvent) => void {
  return (event) => {
    if (event.kind === 'paused') return void metrics.endpointPauses.inc();
    metrics.concurrencyDecreases.inc();
    metrics.concurrencyLimitAfterDecrease.observe(event.limit);
  };
}

/** Scrape-time gauges: queue depth by state, the read models' lag and Redis reachability (one Redis read per scrape each). */
export function scrapeCollector(
  metrics: Metrics,
  sources: {
    queueCounts: () => Promise<Record<string, number>>;
    ping: () => Promise<boolean>;
    circuitsOpen?: () => number;
    /** FIFO webhooks with deliveries in their line. */
    fifoLines?: () => Promise<number>;
    /** How long the longest-waiting FIFO line head has been its line's head (ms; 0: none waits). */
    fifoOldestHeadAgeMs?: () => Promise<number>;
    /** How long the oldest attempt in the delivery log's journal has waited to be projected (ms; 0: none waits). */
    journalAgeMs?: () => Promise<number>;
    /** The projection stream's entries not yet projected, and the oldest one's age (ms; 0: none). */
    projectionBacklog?: () => Promise<{ entries: number; oldestAgeMs: number }>;
  },
): () => Promise<void> {
  return async () => {
    const up = await sources.ping();
    metrics.redisUp.set(up ? 1 : 0);
    if (sources.circuitsOpen) metrics.circuitsOpen.set(sources.circuitsOpen());
    if (!up) return;
    try {
      const counts = await sources.queueCounts();
      for (const state of ['waiting', 'delayed', 'active', 'prioritized', 'failed'])
        metrics.queueJobs.set({ state }, counts[state] ?? 0);
      if (sources.fifoLines) metrics.fifoLines.set(await sources.fifoLines());
      if (sources.fifoOldestHeadAgeMs) metrics.fifoOldestHeadAge.set((await sources.fifoOldestHeadAgeMs()) / 1_000);
      if (sources.journalAgeMs) metrics.deliveryJournalAge.set((await sources.journalAgeMs()) / 1_000);
      if (sources.projectionBacklog) {
        const backlog = await sources.projectionBacklog();
        metrics.readModelBacklog.set(backlog.entries);
        metrics.readModelLag.set(backlog.oldestAgeMs / 1_000);
      }
    } catch {
      metrics.redisUp.set(0);
    }
  };
}

/** Counts the heads of FIFO lines that had to wait (a retry or a deferral), holding back the deliveries behind them. */
export function fifoObserver(metrics: Metrics): () => void {
  return () => metrics.fifoHeadsBlocked.inc();
}
