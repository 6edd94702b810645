import {
  envelopeOf,
  isWebhookEvent,
  parseEvent,
  type AcceptedEvent,
  type EnvelopeSource,
  type EventResult,
  type WebhookEvent,
} from '../domain/event.js';
import type { WebhookEventType } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import { orderingBucketOf } from '../domain/ordering-key.js';
import type { EventDedupe } from '../store/event-dedupe.js';
import type { RedisEventLog } from '../store/event-log.js';
import { deliveryIdFor } from '../domain/ids.js';
import { latestPerEntity, readModelChangeOf } from '../domain/read-model-change.js';
import type { ReadModelFeed } from '../store/read-model-feed.js';
import type { IngestFilters } from './filters.js';
import { traceparentOf, type TraceContext, type Tracing } from '../domain/trace.js';

export type { EventResult } from '../domain/event.js';

/** One delivery to create: an event matched to one webhook. */
export interface DeliveryRequest {
  /** deliveryIdFor(eventId, webhookId), worked out once for the queues and the event log. */
  deliveryId: string;
  eventId: string;
  eventType: WebhookEventType;
  vendorId: string;
  webhookId: string;
  /** The exact JSON body vendors receive. */
  body: string;
  acceptedAtMs: number;
  /** The event's trace (see DeliverJob.traceparent), and the producer's state of it (DeliverJob.tracestate). */
  traceparent?: string;
  tracestate?: string;
  /** The webhook has `ordering: fifo`: the delivery joins the end of one of its lines, in accept order. */
  fifo?: true;
  /**
   * With `fifo`: the bucket of the webhook's ordering key that the event's key value falls in, whose
   * line the delivery joins; absent: the webhook's own line (no ordering key, or no value at its path).
   */
  orderingBucket?: number;
}

/** The delivery side's intake. Durable when it resolves; idempotent per (eventId, webhookId). */
export interface DeliveryEnqueuer {
  /**
   * `bodiesLogged`: the event log holds every request's body already (its write completed), so a
   * first attempt may refer to it instead of carrying the body.
   */
  enqueue(requests: readonly DeliveryRequest[], options?: { bodiesLogged?: boolean }): Promise<void>;
}

/** A subscription found: the webhook, whether its deliveries keep accept order, and by which key when it has one. */
export interface Subscription {
  webhookId: string;
  fifo: boolean;
  /** With `fifo`: the path into the envelope whose value picks a delivery's line (domain/ordering-key.ts). */
  orderingKey?: string;
}

/** Finds the webhook of each (vendor, event type), in one round trip for the whole batch at most. */
export interface SubscriptionLookup {
  matchMany(pairs: readonly { vendorId: string; eventType: WebhookEventType }[]): Promise<(Subscription | undefined)[]>;
}

/** Where a batch came from; only reported to `observe`. */
export type IngestSource = 'http' | 'stream';

/** The trace context a batch came with. */
export interface IngestTrace {
  /** The HTTP request's `traceparent` (and its `tracestate`, passed on as given). */
  parent?: TraceContext;
  traceState?: string;
  /** A stream batch's: each event's `traceparent` field, by input index (absent: none has one). */
  perEvent?: readonly (TraceContext | undefined)[];
  /** A stream batch's: each event's `tracestate` field beside its traceparent, by input index. */
  perEventState?: readonly (string | undefined)[];
  /** A stream batch's stream key (the span's name). */
  stream?: string;
}

/** Counts of one ingested batch, for metrics. */
export interface IngestBatchSummary {
  source: IngestSource;
  accepted: number;
  duplicates: number;
  rejected: number;
  deliveries: number;
  /** Deliveries not made because the webhook's payload filter did not match the event. */
  filtered: number;
  /** Each event's type (`invalid` when it could not be read) and result, in input order. */
  outcomes: { eventType: string; result: EventResult['status'] }[];
  durationMs: number;
}

export interface IngestorDeps {
  /** The marks of ingested event ids (the idempotency window). */
  dedupe: EventDedupe;
  /** The projection stream: each batch's read-model changes, applied by the projector off this path. */
  readModels: ReadModelFeed;
  subscriptions: SubscriptionLookup;
  deliveries: DeliveryEnqueuer;
  /** The webhooks' payload filters; absent: every matched event is delivered. */
  filters?: Pick<IngestFilters, 'rulesOf'>;
  /** Keeps the last events of webhooks with a filter, for the filter dry run. */
  recentEvents?: { remember(entries: ReadonlyMap<string, string>): Promise<void> };
  /** Each webhook's event log (the event feed, range replays); idempotent per delivery id. */
  eventLog?: Pick<RedisEventLog, 'append'>;
  /** Clock, Unix ms; default Date.now. */
  nowMs?: () => number;
  /** Ids for events that come without one; default random UUIDs. */
  newId?: () => string;
  /** Called once per successfully ingested batch (metrics). */
  observe?: (summary: IngestBatchSummary) => void;
  /** Spans of ingest calls (trace export on); absent: the producers' contexts are carried as they came. */
  tracing?: Pick<Tracing, 'startIngest'>;
  /**
   * HOOKLINE_MAX_EVENT_BYTES: a webhook event whose body as delivered (the envelope's JSON, in
   * UTF-8 bytes) is larger is rejected alone, whether a webhook takes it or not; absent: no limit.
   */
  eventBytesMax?: number;
}

/**
 * Validates, dedupes, matches and enqueues batches of events, and hands their read-model changes to
 * the projection stream (docs/architecture.md "The data flow").
 *
 * Why the order of the steps is safe: an event id is marked seen (step 7) only after its read-model
 * changes (5) and its deliveries (6) are durable in Redis. A crash or a Redis error anywhere before
 * step 7 rejects the whole call, so nothing is acknowledged (no 202, no XACK) and the producer or the
 * stream re-sends the batch; re-ingesting then repeats only idempotent work: the projector's writes
 * are versioned by event time (the same version is re-applied, an older one is ignored), so a change
 * appended twice is applied as once, and the enqueuer creates one delivery per (eventId, webhookId).
 * Accepted therefore means: durable in the projection stream, visible in the lookups once the
 * projector applied it (docs/api.md "Read models"). The reverse order (mark, then work) would
 * turn such a crash into a lost event, because the re-sent event would be taken for a duplicate.
 * Two concurrent ingests of one id (a producer retry racing its first try) both pass step 2 and
 * meet at the enqueuer's idempotency. Every call costs a fixed number of Redis round trips, not one
 * per event: the commands of a step are issued together and travel pipelined on the connection.
 */
export class Ingestor {
  private readonly nowMs: () => number;
  private readonly newId: () => string;

  constructor(private readonly deps: IngestorDeps) {
    this.nowMs = deps.nowMs ?? Date.now;
    this.newId = deps.newId ?? newId;
  }

  /**
   * Ingests a batch and answers one result per input event, in input order. Invalid events (and
   * any whose envelope cannot be serialised) are rejected with a reason while the rest proceed. Rejects (and acknowledges nothing) when Redis or
   * the enqueuer fails; calling again with the same events is then safe.
   */
  async ingest(rawEvents: readonly unknown[], source: IngestSource, trace?: IngestTrace): Promise<EventResult[]> {
    const span = this.deps.tracing?.startIngest({
      source,
      ...(trace?.stream === undefined ? {} : { stream: trace.stream }),
      ...(trace?.parent === undefined ? {} : { parent: trace.parent }),
      ...(trace?.traceState === undefined ? {} : { traceState: trace.traceState }),
      ...(trace?.perEvent === undefined ? {} : { links: trace.perEvent.filter((context) => context !== undefined) }),
      events: rawEvents.length,
      startMs: this.nowMs(),
    });
    // What deliveries carry: their event's own context (a stream entry's), else the ingest span's,
    // else (export off) the request's.
    const batchContext = span?.context ?? trace?.parent;
    const contexts = {
      batch: batchContext && traceparentOf(batchContext),
      batchState: trace?.traceState,
      perEvent: trace?.perEvent,
      perEventState: trace?.perEventState,
    };
    if (span === undefined) return this.run(rawEvents, source, contexts);
    try {
      const results = await this.run(rawEvents, source, contexts);
      let deliveries = 0;
      for (const result of results) deliveries += result.deliveries ?? 0;
      span.end(
        {
          accepted: results.filter((r) => r.status === 'accepted').length,
          duplicates: results.filter((r) => r.status === 'duplicate').length,
          rejected: results.filter((r) => r.status === 'rejected').length,
          deliveries,
        },
        this.nowMs(),
      );
      return results;
    } catch (error) {
      span.fail(error as Error, this.nowMs());
      throw error;
    }
  }

  /**
   * Why an event's body as delivered (`body`, or the envelope to serialise) is too large to take,
   * or undefined: within HOOKLINE_MAX_EVENT_BYTES, or no limit, or a body that cannot be written
   * (no delivery, so nothing to refuse; one with a delivery is refused for that).
   */
  /**
   * Enqueues a batch's deliveries. With the event log, once it holds their bodies (one round trip
   * after it), so that first attempts refer to them there rather than carry a second copy to Redis
   * (see delivery/first-attempts.ts); the log is written once per delivery however often the batch
   * is ingested again.
   */
  private async enqueue(requests: readonly DeliveryRequest[]): Promise<void> {
    const { eventLog, deliveries } = this.deps;
    if (eventLog === undefined) return deliveries.enqueue(requests);
    await eventLog.append(
      requests.map((r) => ({
        webhookId: r.webhookId,
        deliveryId: r.deliveryId,
        eventId: r.eventId,
        eventType: r.eventType,
        body: r.body,
      })),
    );
    await deliveries.enqueue(requests, { bodiesLogged: true });
  }

  private sizeProblem(body: string | ReturnType<typeof envelopeOf>): string | undefined {
    const max = this.deps.eventBytesMax;
    if (max === undefined) return undefined;
    const json = typeof body === 'string' ? body : serialised(body);
    if (typeof json !== 'string') return undefined;
    // Most bodies are far below, which their length alone tells: a UTF-16 unit is at most three UTF-8 bytes.
    if (json.length * 3 <= max) return undefined;
    const bytes = Buffer.byteLength(json);
    if (bytes <= max) return undefined;
    return (
      `the event is ${bytes.toLocaleString('en-US')} bytes as delivered, over the limit of ${max.toLocaleString('en-US')} ` +
      '(HOOKLINE_MAX_EVENT_BYTES): receivers commonly refuse larger requests, so it is not accepted'
    );
  }

  private async run(
    rawEvents: readonly unknown[],
    source: IngestSource,
    contexts: {
      batch: string | undefined;
      batchState: string | undefined;
      perEvent: readonly (TraceContext | undefined)[] | undefined;
      perEventState: readonly (string | undefined)[] | undefined;
    },
  ): Promise<EventResult[]> {
    const acceptedAtMs = this.nowMs();
    const results: EventResult[] = new Array<EventResult>(rawEvents.length);

    // 1. Validate each event on its own; a bad one is rejected with a reason naming the field.
    const valid: { index: number; event: AcceptedEvent }[] = [];
    rawEvents.forEach((raw, index) => {
      const parsed = parseEvent(raw, { acceptedAtMs, newId: this.newId });
      if (parsed.ok) valid.push({ index, event: parsed.event });
      else
        results[index] = {
          ...(parsed.event_id === undefined ? {} : { event_id: parsed.event_id }),
          status: 'rejected',
          reason: parsed.reason,
        };
    });

    // 2. Dedupe: the first occurrence of an id within the batch wins; then one lookup of the marks for the batch.
    const firstOfId = new Set<string>();
    const unique: { index: number; event: AcceptedEvent }[] = [];
    for (const candidate of valid) {
      if (firstOfId.has(candidate.event.event_id))
        results[candidate.index] = { event_id: candidate.event.event_id, status: 'duplicate' };
      else {
        firstOfId.add(candidate.event.event_id);
        unique.push(candidate);
      }
    }
    const seen = await this.deps.dedupe.seen(
      unique.map(({ event }) => event.event_id),
      acceptedAtMs,
    );
    const fresh = unique.filter((candidate, i) => {
      if (!seen[i]) return true;
      results[candidate.index] = { event_id: candidate.event.event_id, status: 'duplicate' };
      return false;
    });

    let deliveryCount = 0;
    let filtered = 0;
    let taken = fresh;
    if (fresh.length > 0) {
      // 3. Match the webhook events to subscriptions, and those to their payload filters (both cached
      // in the process: usually no round trip).
      const webhookEvents = fresh.flatMap((candidate) =>
        isWebhookEvent(candidate.event) ? [{ ...candidate, event: candidate.event }] : [],
      );
      const subscriptions =
        webhookEvents.length === 0
          ? []
          : await this.deps.subscriptions.matchMany(
              webhookEvents.map(({ event }) => ({ vendorId: event.vendor_id, eventType: event.event_type })),
            );
      const rules = this.deps.filters
        ? await this.deps.filters.rulesOf(
            subscriptions.flatMap((found) => (found === undefined ? [] : [found.webhookId])),
          )
        : [];
      let checked = 0;

      // 4. Build each delivery's body, once, so every attempt sends the same bytes; before anything
      // is written, so that an event whose envelope cannot be serialised, or is larger than a
      // receiver would take, is rejected alone, with nothing of it stored, while the rest of the
      // batch goes on. A filter that does not match the event means no delivery, not a failure.
      const deliveriesOf = new Map<number, number>();
      const requests: DeliveryRequest[] = [];
      const refused = new Set<number>();
      const refuse = (index: number, event: WebhookEvent, reason: string) => {
        refused.add(index);
        results[index] = { event_id: event.event_id, status: 'rejected', reason };
      };
      // Of each webhook with a filter, the batch's last event, kept for the filter dry run: its
      // envelope, and its JSON when a delivery was made of it. An event held back is serialised at
      // the end, and only if no later event of the batch replaced it.
      const recent = new Map<string, { envelope: ReturnType<typeof envelopeOf>; body?: string }>();
      webhookEvents.forEach(({ index, event }, i) => {
        const subscription = subscriptions[i];
        const rule = subscription === undefined ? undefined : rules[checked++];
        const check = rule?.check;
        if (subscription === undefined && this.deps.eventBytesMax === undefined) return;
        const envelope = envelopeOf(sentEnvelopeSource(event));
        if (subscription === undefined || (check !== undefined && !check(envelope))) {
          // No delivery, but measured all the same: whether an event is taken never depends on who subscribes.
          const tooLarge = this.sizeProblem(envelope);
          if (tooLarge !== undefined) return refuse(index, event, tooLarge);
          if (subscription === undefined) return;
          recent.set(subscription.webhookId, { envelope });
          filtered += 1;
          return;
        }
        // The webhook's include_fields cut data; the filter and the ordering key saw all of it.
        const pick = rule?.pick;
        const body = serialised(pick === undefined ? envelope : { ...envelope, data: pick(envelope.data) });
        if (typeof body !== 'string')
          return refuse(index, event, `data: cannot be serialised as JSON (${body.message})`);
        // Measured whole, cut or not: whether an event is taken never depends on who subscribes.
        const tooLarge = this.sizeProblem(pick === undefined ? body : envelope);
        if (tooLarge !== undefined) return refuse(index, event, tooLarge);
        // The envelope the filter saw is the body (unless cut): serialised once, for the delivery and the dry run.
        if (check !== undefined)
          recent.set(subscription.webhookId, pick === undefined ? { envelope, body } : { envelope });
        const own = contexts.perEvent?.[index];
        const trace =
          own === undefined
            ? { traceparent: contexts.batch, tracestate: contexts.batchState }
            : { traceparent: traceparentOf(own), tracestate: contexts.perEventState?.[index] };
        requests.push(deliveryRequest(event, subscription, acceptedAtMs, body, envelope, trace));
        deliveriesOf.set(index, (deliveriesOf.get(index) ?? 0) + 1);
      });
      taken = refused.size === 0 ? fresh : fresh.filter(({ index }) => !refused.has(index));

      // 5. The read models' changes, newest per entity (the writes are versioned by event time, so an
      // older change of the batch would be refused anyway; see domain/read-model-change.ts), go to the
      // projection stream with step 6: one XADD, applied by the projector off this path.
      const readModelChanges = latestPerEntity(taken.map(({ event }) => readModelChangeOf(event)));

      // 6. Enqueue every delivery of the batch in one call. A held-back event that cannot be
      // serialised is only not kept for the dry run: it has no delivery.
      const remembered = new Map<string, string>();
      for (const [webhookId, { envelope, body }] of recent) {
        const json = body ?? serialised(envelope);
        if (typeof json === 'string') remembered.set(webhookId, json);
      }
      // The event log and the read-model changes share this step (see enqueue below).
      await Promise.all([
        this.deps.readModels.append(readModelChanges),
        remembered.size > 0 ? this.deps.recentEvents?.remember(remembered) : undefined,
        requests.length > 0 ? this.enqueue(requests) : undefined,
      ]);

      // 7. Only now remember the ids: everything above is durable, so a re-send may be skipped.
      await this.deps.dedupe.mark(
        taken.map(({ event }) => event.event_id),
        acceptedAtMs,
      );

      for (const { index, event } of taken) {
        const deliveries = deliveriesOf.get(index) ?? 0;
        deliveryCount += deliveries;
        results[index] = { event_id: event.event_id, status: 'accepted', deliveries };
      }
    }

    if (this.deps.observe) {
      const typeOf = new Map(valid.map(({ index, event }) => [index, event.event_type as string]));
      this.deps.observe({
        source,
        accepted: taken.length,
        duplicates: results.filter((r) => r.status === 'duplicate').length,
        rejected: results.filter((r) => r.status === 'rejected').length,
        deliveries: deliveryCount,
        filtered,
        outcomes: results.map((r, index) => ({ eventType: typeOf.get(index) ?? 'invalid', result: r.status })),
        durationMs: this.nowMs() - acceptedAtMs,
      });
    }
    return results;
  }
}

/**
 * The envelope as JSON, or the error that stopped it. Validation bounds an event's nesting (and so
 * rules out cycles), so only an event handed over as an object rather than parsed from JSON (one
 * holding a BigInt, say) can fail here.
 */
function serialised(envelope: ReturnType<typeof envelopeOf>): string | Error {
  try {
    return JSON.stringify(envelope);
  } catch (error) {
    return error as Error;
  }
}

/**
 * `body`: the event's envelope as JSON (the envelope of sentEnvelopeSource), the data as the producer
 * sent it; `envelope`, the same not serialised, where a FIFO webhook's ordering key is read.
 */
function deliveryRequest(
  event: WebhookEvent,
  subscription: Subscription,
  acceptedAtMs: number,
  body: string,
  envelope: unknown,
  { traceparent, tracestate }: { traceparent: string | undefined; tracestate: string | undefined },
): DeliveryRequest {
  const bucket =
    subscription.fifo && subscription.orderingKey !== undefined
      ? orderingBucketOf(envelope, subscription.orderingKey)
      : undefined;
  return {
    deliveryId: deliveryIdFor(event.event_id, subscription.webhookId),
    eventId: event.event_id,
    eventType: event.event_type,
    vendorId: event.vendor_id,
    webhookId: subscription.webhookId,
    ...(traceparent === undefined ? {} : { traceparent }),
    ...(traceparent === undefined || tracestate === undefined ? {} : { tracestate }),
    ...(subscription.fifo ? { fifo: true as const } : {}),
    ...(bucket === undefined ? {} : { orderingBucket: bucket }),
    body,
    acceptedAtMs,
  };
}

/**
 * The envelope's fields of an event, with the data as the producer sent it, never the validated
 * copy: vendors get every field, and no field the producer did not send.
 */
function sentEnvelopeSource(event: WebhookEvent): EnvelopeSource {
  return { event_id: event.event_id, event_type: event.event_type, timestamp: event.timestamp, data: event.sentData };
}
