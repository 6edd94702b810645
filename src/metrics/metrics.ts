import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { WEBHOOK_EVENT_TYPES } from '../domain/events.js';

/** Attempt-duration buckets (seconds), up to the default 15 s delivery timeout. */
const ATTEMPT_DURATION_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30];
/** End-to-end lag buckets (seconds): from milliseconds to the one-day retry horizon. */
const LAG_BUCKETS_S = [
  0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1_800, 3_600, 21_600, 86_400, 259_200,
];
/** Read-model delay buckets (seconds): from a millisecond to a projector that was down for minutes. */
const READ_MODEL_DELAY_BUCKETS_S = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
];
/** Admin API latency buckets (seconds). */
const HTTP_DURATION_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * Every metric Hookline exports, defined once. Names are `hookline_*`, in base units; counters end
 * in `_total`; labels are few-valued (never a webhook id, vendor id or URL). Node's default process
 * metrics (`process_*`, `nodejs_*`) are registered beside them.
 */
export function createMetrics(options: { role: string; defaultMetrics?: boolean } = { role: 'all' }) {
  const registry = new Registry();
  registry.setDefaultLabels({ role: options.role });
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry });
    // Gauges named like counters (promtool flags them); the per-type gauges without `_total` stay.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
      registry.removeSingleMetric(name);
  }
  const registers = [registry];

  return {
    registry,
    eventsIngested: new Counter({
      name: 'hookline_events_ingested_total',
      help: 'Events handed to ingest, by event type (invalid when it could not be read), source (http, stream) and result (accepted, duplicate, rejected).',
      labelNames: ['event_type', 'source', 'result'] as const,
      registers,
    }),
    ingestStreamDeadLetters: new Counter({
      name: 'hookline_ingest_stream_dead_letters_total',
      help: 'Ingest stream entries moved to the dead-letter stream instead of being ingested, by cause (unreadable: no event as JSON; rejected: the event is invalid; failed: ingesting it alone failed).',
      labelNames: ['cause'] as const,
      registers,
    }),
    ingestBatchDuration: new Histogram({
      name: 'hookline_ingest_batch_duration_seconds',
      help: 'Time to ingest one batch: validate, dedupe, match, enqueue and hand the read-model changes to the projection stream.',
      labelNames: ['source'] as const,
      buckets: HTTP_DURATION_BUCKETS_S,
      registers,
    }),
    readModelLag: new Gauge({
      name: 'hookline_read_model_lag_seconds',
      help: 'How far the read models (machines, agent statuses, tasks) are behind ingest: the age of the oldest projection stream entry not yet projected, read from Redis at scrape time; 0 when every accepted event is visible in the lookups.',
      registers,
    }),
    readModelBacklog: new Gauge({
      name: 'hookline_read_model_entries_waiting',
      help: 'Projection stream entries (one per ingest batch) not yet projected into the read models, read from Redis at scrape time.',
      registers,
    }),
    readModelDelay: new Histogram({
      name: 'hookline_read_model_delay_seconds',
      help: 'Per projection stream entry this process projected: from its append by ingest (Redis’s clock) to its changes being visible in the lookups.',
      buckets: READ_MODEL_DELAY_BUCKETS_S,
      registers,
    }),
    readModelEntriesSkipped: new Counter({
      name: 'hookline_read_model_entries_skipped_total',
      help: 'Projection stream entries holding a change that could not be read (malformed), left out of the read models with a log line; the rest of the entry was applied.',
      registers,
    }),
    deliveriesFinished: new Counter({
      name: 'hookline_deliveries_finished_total',
      help: 'Deliveries that reached an end, by event type and outcome (delivered, dead_lettered, dropped).',
      labelNames: ['event_type', 'outcome'] as const,
      registers,
    }),
    deliveryAttempts: new Counter({
      name: 'hookline_delivery_attempts_total',
      help: 'Delivery attempts by event type and outcome (delivered, http_3xx, http_4xx, http_5xx, timeout, dns, connect, tls, ssrf_blocked, network, auth; circuit_open, webhook_disabled, paused_expired and max_age_expired were not sent).',
      labelNames: ['event_type', 'outcome'] as const,
      registers,
    }),
    deliveryRetries: new Counter({
      name: 'hookline_delivery_retries_total',
      help: 'Failed attempts that were scheduled for another try, by event type.',
      labelNames: ['event_type'] as const,
      registers,
    }),
    attemptDuration: new Histogram({
      name: 'hookline_delivery_attempt_duration_seconds',
      help: 'Duration of one delivery attempt (connect to response or error), by outcome.',
      labelNames: ['outcome'] as const,
      buckets: ATTEMPT_DURATION_BUCKETS_S,
      registers,
    }),
    deliveryLag: new Histogram({
      name: 'hookline_delivery_lag_seconds',
      help: 'End-to-end lag of delivered events: accepted by ingest to a 2xx from the receiver.',
      labelNames: ['event_type'] as const,
      buckets: LAG_BUCKETS_S,
      registers,
    }),
    deliveriesDeferred: new Counter({
      name: 'hookline_deliveries_deferred_total',
      help: 'Deliveries put back in the queue without an attempt, by reason: their endpoint was isolated (open, probing, slow) their webhook was over its rate limit (rate_limited), their endpoint was at its concurrency limit (concurrency) or paused by a Retry-After (paused), or their webhook was paused by its vendor (webhook_paused: held until enabled).',
      labelNames: ['reason'] as const,
      registers,
    }),
    deliveriesFiltered: new Counter({
      name: 'hookline_deliveries_filtered_total',
      help: 'Deliveries not made because the webhook’s payload filter did not match the event (not failures).',
      registers,
    }),
    rateLimitChecks: new Counter({
      name: 'hookline_rate_limit_checks_total',
      help: 'Sends of webhooks with a rate_limit_per_second checked against their limit, by result: sent (the rate at which rate-limited webhooks are sent to, all together) or deferred (over the limit, put back without an attempt).',
      labelNames: ['result'] as const,
      registers,
    }),
    deadLetters: new Counter({
      name: 'hookline_dead_letters_total',
      help: 'Deliveries dead-lettered after their last attempt (or because their webhook was disabled, or paused past their retry window), by event type.',
      labelNames: ['event_type'] as const,
      registers,
    }),
    webhooksDisabled: new Counter({
      name: 'hookline_webhooks_disabled_total',
      help: 'Webhooks disabled by the engine, by reason (gone: 410; failing: the sustained-failure window).',
      labelNames: ['reason'] as const,
      registers,
    }),
    ssrfBlocked: new Counter({
      name: 'hookline_ssrf_blocked_total',
      help: 'Delivery attempts refused by the SSRF guard (private, loopback, link-local or reserved target).',
      registers,
    }),
    circuitTransitions: new Counter({
      name: 'hookline_circuit_transitions_total',
      help: 'Per-endpoint circuit breaker state changes in this worker, by the state entered (open, half_open, closed).',
      labelNames: ['state'] as const,
      registers,
    }),
    concurrencyDecreases: new Counter({
      name: 'hookline_endpoint_concurrency_decreases_total',
      help: 'Times this worker halved an endpoint’s concurrency limit (429, 503, timeout or connection error).',
      registers,
    }),
    concurrencyLimitAfterDecrease: new Histogram({
      name: 'hookline_endpoint_concurrency_limit',
      help: 'An endpoint’s concurrency limit right after each decrease in this worker: where endpoints that push back settle.',
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_000],
      registers,
    }),
    endpointPauses: new Counter({
      name: 'hookline_endpoint_pauses_total',
      help: 'Endpoints paused for all workers because a 429 or 503 carried a Retry-After (counted by the worker that got it).',
      registers,
    }),
    circuitsOpen: new Gauge({
      name: 'hookline_circuits_open',
      help: 'Endpoints (one vendor’s receiver origin each) whose circuit is open in this worker.',
      registers,
    }),
    sendsPaused: new Gauge({
      name: 'hookline_delivery_sends_paused',
      help: '1 while this worker starts no delivery sends because Redis is unreachable (an attempt could not be recorded, or the connection dropped).',
      registers,
    }),
    queueJobs: new Gauge({
      name: 'hookline_queue_jobs',
      help: 'Delivery jobs in the queues by state (waiting, delayed, active, prioritized, failed), read from Redis at scrape time.',
      labelNames: ['state'] as const,
      registers,
    }),
    fifoLines: new Gauge({
      name: 'hookline_fifo_lines',
      help: 'FIFO lines with deliveries waiting (a webhook’s own line, or one bucket of its ordering key), read from Redis at scrape time.',
      registers,
    }),
    fifoOldestHeadAge: new Gauge({
      name: 'hookline_fifo_oldest_head_age_seconds',
      help: 'How long the FIFO line head that has waited longest has been at the head of its line (since it joined an empty line or the delivery before it left; a paused webhook’s heads left out), read from Redis at scrape time; 0 when no line waits.',
      registers,
    }),
    deliveryJournalAge: new Gauge({
      name: 'hookline_delivery_journal_age_seconds',
      help: 'How long the oldest delivered first attempt in the delivery log’s journal has waited to be projected (how far the delivery log lags behind what was delivered), read from Redis at scrape time; 0 when none waits.',
      registers,
    }),
    fifoHeadsBlocked: new Counter({
      name: 'hookline_fifo_heads_blocked_total',
      help: 'Times the head of a FIFO line had to wait (a retry or a deferral), holding back the deliveries behind it.',
      registers,
    }),
    connectionsOpened: new Counter({
      name: 'hookline_connections_opened_total',
      help: 'Connections this worker opened to receivers, by kind: plain (http), tls_full (a full TLS handshake) or tls_resumed (a TLS session resumed). Divided by delivery attempts: how often an attempt needed a new connection.',
      labelNames: ['kind'] as const,
      registers,
    }),
    receiverTokenRequests: new Counter({
      name: 'hookline_receiver_token_requests_total',
      help: 'OAuth2 token requests this worker made for webhooks with oauth2_client_credentials auth, by outcome (ok or error). Tokens are shared by all workers until shortly before they expire, so ok grows by about one per client per token lifetime; error means deliveries were not sent (outcome auth).',
      labelNames: ['outcome'] as const,
      registers,
    }),
    redisUp: new Gauge({
      name: 'hookline_redis_up',
      help: '1 when Redis answered PING at scrape time, else 0.',
      registers,
    }),
    httpRequests: new Counter({
      name: 'hookline_http_requests_total',
      help: 'Admin API requests by route pattern, method and status code.',
      labelNames: ['route', 'method', 'status'] as const,
      registers,
    }),
    httpDuration: new Histogram({
      name: 'hookline_http_request_duration_seconds',
      help: 'Admin API request latency by route pattern and method.',
      labelNames: ['route', 'method'] as const,
      buckets: HTTP_DURATION_BUCKETS_S,
      registers,
    }),
    buildInfo: new Gauge({
      name: 'hookline_build_info',
      help: 'Always 1; the version label says which Hookline runs.',
      labelNames: ['version'] as const,
      registers,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * Starts the labelled counters that alerts watch at 0 for every known label value, so the first
 * dead letter or disable shows as an increase instead of a series appearing at 1.
 */
export function initialiseSeries(metrics: Metrics): void {
  for (const eventType of WEBHOOK_EVENT_TYPES) {
    metrics.deadLetters.inc({ event_type: eventType }, 0);
    metrics.deliveryRetries.inc({ event_type: eventType }, 0);
    for (const outcome of ['delivered', 'dead_lettered', 'dropped'])
      metrics.deliveriesFinished.inc({ event_type: eventType, outcome }, 0);
  }
  for (const reason of ['gone', 'failing']) metrics.webhooksDisabled.inc({ reason }, 0);
  for (const state of ['open', 'half_open', 'closed']) metrics.circuitTransitions.inc({ state }, 0);
  for (const result of ['sent', 'deferred']) metrics.rateLimitChecks.inc({ result }, 0);
  for (const cause of ['unreadable', 'rejected', 'failed']) metrics.ingestStreamDeadLetters.inc({ cause }, 0);
  for (const kind of ['plain', 'tls_full', 'tls_resumed']) metrics.connectionsOpened.inc({ kind }, 0);
  for (const outcome of ['ok', 'error']) metrics.receiverTokenRequests.inc({ outcome }, 0);
  metrics.ssrfBlocked.inc(0);
  metrics.deliveriesFiltered.inc(0);
  metrics.concurrencyDecreases.inc(0);
  metrics.endpointPauses.inc(0);
  metrics.readModelEntriesSkipped.inc(0);
}
