import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { eventSubjectOf, type EventSubject } from '../../domain/event-subject.js';
import { isUuid } from '../../domain/ids.js';
import type { Webhook } from '../../domain/webhook.js';
import type { DeadLetterReplayer } from '../../tasks/replay.js';
import { attemptRequestHeaders } from '../../delivery/outbound/request-headers.js';
import type { TestEventSender } from '../../tasks/test-event.js';
import { DELIVERY_STATUSES, type AttemptRecord } from '../../domain/delivery.js';
import type { DeliveryCursor, DeliveryHistory, DeliverySummary } from '../../store/delivery-log.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import { vendorOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid, isoOrNull } from '../errors.js';
import { errorResponses, isoTime, noQueryParameters, queryParameters } from '../schemas.js';

const iso = isoOrNull;

export const deliverySchema = z
  .object({
    delivery_id: z.string(),
    event_id: z.string(),
    event_type: z.string(),
    status: z
      .enum(DELIVERY_STATUSES)
      .describe('pending, retrying, delivered, dead (dead letter), dropped (webhook deleted) or replayed.'),
    attempts: z.number().int(),
    last_outcome: z
      .string()
      .nullable()
      .describe(
        'delivered, http_3xx, http_4xx, http_5xx, timeout, dns, connect, tls, ssrf_blocked, network, auth (no OAuth2 token; not sent), circuit_open (due while the endpoint’s circuit was open; not sent), ' +
          'webhook_disabled (disabled by the engine; not sent), paused_expired (its webhook paused past the end of its retry window; not sent) ' +
          'or max_age_expired (older than its webhook’s retry.max_age; not sent).',
      ),
    last_status_code: z.number().int().nullable(),
    created_at: z.string().describe('When the event was accepted.'),
    updated_at: z.string(),
    next_attempt_at: z
      .string()
      .nullable()
      .describe(
        'When the next attempt will be made (pending and retrying deliveries): the retry schedule, moved later while the endpoint’s circuit holds the delivery back. ' +
          'While its webhook is paused: when its hold ends (the end of its retry window), unless the webhook is enabled before.',
      ),
    replay_of: z.string().nullable().describe('The dead letter this delivery replays.'),
    machine_id: z
      .string()
      .nullable()
      .describe(
        'The machine the event concerns: data.machine_id of a deployment event, data.metadata.machine_id of a machine event. ' +
          'Read from the body the delivery sent while it is kept (the event log, a dead letter); null when the body names none ' +
          '(a test event) or is no longer kept.',
      ),
    deployment_id: z
      .string()
      .nullable()
      .describe(
        'The deployment a deployment event concerns (data.deployment_id), read as machine_id is; null otherwise.',
      ),
  })
  .meta({ id: 'Delivery' });

const attemptSchema = z
  .object({
    attempt: z.number().int(),
    attempted_at: z.string(),
    outcome: z.string(),
    status_code: z.number().int().nullable(),
    duration_ms: z.number(),
    error: z.string().nullable(),
    response_snippet: z.string().nullable().describe('The first 4 KiB of the response body.'),
    trace_id: z
      .string()
      .nullable()
      .describe(
        'The trace the attempt belongs to (W3C trace id, 32 hex digits): the event’s trace, from the producer’s traceparent or ' +
          'the engine’s ingest span; null when the delivery had none.',
      ),
    request_headers: z
      .record(z.string(), z.string())
      .nullable()
      .describe(
        'The headers of the request this attempt sent, exactly as the receiver got them: lowercase names in the order sent ' +
          '(host, connection, webhook-id, webhook-timestamp, webhook-signature, x-webhook-signature, x-webhook-event, ' +
          'x-webhook-attempt, content-type, user-agent, content-length). Signature values are masked to their scheme ' +
          'prefix (`v1,••••`, two entries during a secret rotation; `sha256=••••`). null when no request was made ' +
          '(circuit_open, webhook_disabled, paused_expired, max_age_expired, and auth when no token came for it); for a connection that failed (dns, connect, tls, ssrf_blocked), the headers it would have sent.',
      ),
  })
  .meta({ id: 'DeliveryAttempt' });

type DeliveryResource = z.infer<typeof deliverySchema>;

function toDelivery(d: DeliverySummary, subject: EventSubject): DeliveryResource {
  return {
    delivery_id: d.deliveryId,
    event_id: d.eventId,
    event_type: d.eventType,
    status: d.status,
    attempts: d.attempts,
    last_outcome: d.lastOutcome ?? null,
    last_status_code: d.lastStatusCode ?? null,
    created_at: iso(d.acceptedAtMs) ?? '',
    updated_at: iso(d.updatedAtMs) ?? '',
    next_attempt_at: d.status === 'retrying' || d.status === 'pending' ? iso(d.nextAttemptAtMs) : null,
    replay_of: d.replayOf ?? null,
    machine_id: subject.machineId ?? null,
    deployment_id: subject.deploymentId ?? null,
  };
}

/**
 * Deliveries as the API shows them, each with the machine and deployment its event concerns (read
 * from the bodies kept: one read for the lot, nothing parsed but what is shown).
 */
export async function deliveryResources(
  history: Pick<DeliveryHistory, 'eventBodies'>,
  deliveries: readonly DeliverySummary[],
): Promise<DeliveryResource[]> {
  const bodies = await history.eventBodies(deliveries);
  return deliveries.map((d, i) => toDelivery(d, eventSubjectOf(bodies[i])));
}

function toAttempt(a: AttemptRecord, delivery: DeliverySummary): z.infer<typeof attemptSchema> {
  return {
    attempt: a.attempt,
    attempted_at: new Date(a.atMs).toISOString(),
    outcome: a.outcome,
    status_code: a.statusCode ?? null,
    duration_ms: Math.round(a.durationMs),
    error: a.error ?? null,
    response_snippet: a.responseSnippet ?? null,
    trace_id: a.traceId ?? null,
    request_headers:
      a.sent === undefined
        ? null
        : attemptRequestHeaders({
            eventId: delivery.eventId,
            eventType: delivery.eventType,
            attempt: a.attempt,
            atMs: a.atMs,
            sent: a.sent,
          }),
  };
}

const webhookParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID).') });
const deliveryParams = webhookParams.extend({ delivery_id: z.string().describe('Delivery id (UUID).') });
const limit = z
  .string()
  .regex(/^\d{1,3}$/, 'limit must be a whole number from 1 to 100')
  .transform(Number)
  .refine((n) => n >= 1 && n <= 100, 'limit must be a whole number from 1 to 100')
  .optional()
  .describe('How many, newest first (1-100, default 20).');
const limitQuery = queryParameters({ limit });
const deliveriesQuery = queryParameters({
  limit,
  status: z
    .enum(DELIVERY_STATUSES, { error: `status must be one of ${DELIVERY_STATUSES.join(', ')}` })
    .optional()
    .describe(`Only deliveries in this status (${DELIVERY_STATUSES.join(', ')}).`),
  event_type: z
    .string()
    .max(128)
    .optional()
    .describe('Only deliveries of this event type (a test event has the webhook’s).'),
  since: isoTime('since').optional().describe('Only deliveries accepted at or after this time (ISO 8601).'),
  until: isoTime('until').optional().describe('Only deliveries accepted at or before this time (ISO 8601).'),
  cursor: z
    .string()
    .max(200)
    .optional()
    .describe('next_cursor of the previous page: continues after its last delivery, with the same filters.'),
});

/** A page cursor: the accepted time and id of the page's last delivery, opaque to clients. */
function encodeCursor(cursor: DeliveryCursor): string {
  return Buffer.from(`${cursor.acceptedAtMs}:${cursor.deliveryId}`).toString('base64url');
}

function decodeCursor(text: string): DeliveryCursor {
  const [ms, id, extra] = Buffer.from(text, 'base64url').toString('utf8').split(':');
  if (extra !== undefined || ms === undefined || !/^\d{1,15}$/.test(ms) || id === undefined || !isUuid(id)) {
    throw new ApiError('invalid_request', 'Invalid query parameters: cursor is not a next_cursor this API answered');
  }
  return { acceptedAtMs: Number(ms), deliveryId: id };
}

/** The calling vendor's webhook named in a path, or 400 (not a UUID) / 404 (none of the vendor's). */
export async function vendorWebhook(
  webhooks: Pick<WebhookRegistry, 'get'>,
  request: FastifyRequest,
  webhookId: string,
): Promise<Webhook> {
  if (!isUuid(webhookId)) throw new ApiError('invalid_webhook_id');
  const webhook = await webhooks.get(vendorOf(request), webhookId.toLowerCase());
  if (!webhook) throw new ApiError('webhook_not_found');
  return webhook;
}

export interface DeliveryRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  history: DeliveryHistory;
  replayer: Pick<DeadLetterReplayer, 'replayOne' | 'startReplayAll'>;
  testEvents: Pick<TestEventSender, 'send'>;
}

/**
 * A webhook's delivery log, dead letters, replays and test events, under
 * `/vendors/v1/webhooks/{webhook_id}/…`, scoped to the key's vendor (role vendor).
 */
export function deliveryRoutes(deps: DeliveryRouteDeps): FastifyPluginAsyncZod {
  const ownWebhook = (request: FastifyRequest, webhookId: string) => vendorWebhook(deps.webhooks, request, webhookId);
  const checkedDeliveryId = (deliveryId: string) => checkedUuid(deliveryId, 'invalid_delivery_id');

  return async (app) => {
    // Portal sessions: reading needs read; replays and test events need replay.
    const onRequest = deps.authorize('vendor', { portal: 'read' });
    const onReplay = deps.authorize('vendor', { portal: 'replay' });
    const tags = ['deliveries'];

    app.get(
      '/vendors/v1/webhooks/:webhook_id/deliveries',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Recent deliveries of a webhook',
          description:
            'The webhook’s recent deliveries (the last 1000), newest first, filtered by status, event type and accepted time. ' +
            'A page ends with next_cursor when more may follow: pass it as cursor, with the same filters, for the next page.',
          params: webhookParams,
          querystring: deliveriesQuery,
          response: {
            200: z.object({
              deliveries: z.array(deliverySchema),
              next_cursor: z.string().nullable().describe('Pass as cursor for the next page; null on the last page.'),
            }),
            ...errorResponses(400, 401, 403, 404),
          },
        },
      },
      async (request) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        const { limit: count = 20, status, event_type: eventType, since, until, cursor } = request.query;
        if (since !== undefined && until !== undefined && since > until)
          throw new ApiError('invalid_request', 'Invalid query parameters: since is after until');
        const page = await deps.history.page(webhook.id, {
          limit: count,
          ...(status === undefined ? {} : { status }),
          ...(eventType === undefined ? {} : { eventType }),
          ...(since === undefined ? {} : { sinceMs: since }),
          ...(until === undefined ? {} : { untilMs: until }),
          ...(cursor === undefined ? {} : { after: decodeCursor(cursor) }),
        });
        return {
          deliveries: await deliveryResources(deps.history, page.deliveries),
          next_cursor: page.next === undefined ? null : encodeCursor(page.next),
        };
      },
    );

    app.get(
      '/vendors/v1/webhooks/:webhook_id/deliveries/:delivery_id',
      {
        onRequest,
        schema: {
          tags,
          summary: 'One delivery with every attempt',
          description:
            'Each attempt with its time, outcome, status code, duration, the first 4 KiB of the answer, and the headers of the request it sent (signatures masked).',
          params: deliveryParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({ delivery: deliverySchema, attempts: z.array(attemptSchema) }),
            ...errorResponses(400, 401, 403, 404),
          },
        },
      },
      async (request) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        const found = await deps.history.get(webhook.id, checkedDeliveryId(request.params.delivery_id));
        if (!found) throw new ApiError('delivery_not_found');
        const [delivery] = await deliveryResources(deps.history, [found.delivery]);
        return {
          delivery: delivery!,
          attempts: found.attempts.map((a) => toAttempt(a, found.delivery)),
        };
      },
    );

    app.get(
      '/vendors/v1/webhooks/:webhook_id/dead-letters',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Dead letters of a webhook (every attempt failed)',
          description: 'Newest first. Replay one, or all of them as a task.',
          params: webhookParams,
          querystring: limitQuery,
          response: {
            200: z.object({
              dead_letters: z.array(deliverySchema),
              total: z
                .number()
                .int()
                .describe('How many dead letters the webhook has: the ones a bulk replay started now would replay.'),
            }),
            ...errorResponses(400, 401, 403, 404),
          },
        },
      },
      async (request) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        const [deadLetters, total] = await Promise.all([
          deps.history.deadLetters(webhook.id, request.query.limit ?? 20),
          deps.history.deadLetterCount(webhook.id),
        ]);
        return { dead_letters: await deliveryResources(deps.history, deadLetters), total };
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/dead-letters/:delivery_id/replay',
      {
        onRequest: onReplay,
        schema: {
          tags,
          summary: 'Replay one dead letter',
          description: 'Queues a new delivery of the same event; answers its id.',
          params: deliveryParams,
          querystring: noQueryParameters,
          response: {
            202: z.object({ delivery_id: z.string(), replay_of: z.string() }),
            ...errorResponses(400, 401, 403, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        const deliveryId = checkedDeliveryId(request.params.delivery_id);
        const result = await deps.replayer.replayOne(webhook.id, deliveryId);
        if (!result.ok) throw new ApiError(result.reason === 'not_found' ? 'delivery_not_found' : 'not_dead_letter');
        return reply.code(202).send({ delivery_id: result.deliveryId, replay_of: deliveryId });
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/dead-letters/replay',
      {
        onRequest: onReplay,
        schema: {
          tags,
          summary: 'Replay every dead letter of a webhook',
          description:
            'Runs as a task: poll GET /rental/v1/tasks/{task_id} (with a tasks:read key) for status and progress.',
          params: webhookParams,
          querystring: noQueryParameters,
          response: { 202: z.object({ task_id: z.string() }), ...errorResponses(400, 401, 403, 404) },
        },
      },
      async (request, reply) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        return reply.code(202).send({ task_id: await deps.replayer.startReplayAll(webhook.vendorId, webhook.id) });
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/test',
      {
        onRequest: onReplay,
        schema: {
          tags,
          summary: 'Send a test event',
          description:
            'Queues a signed event of the webhook’s type with data {"test": true, "message": "A test event sent from the Hookline API."}.',
          params: webhookParams,
          querystring: noQueryParameters,
          response: {
            202: z.object({ delivery_id: z.string(), event_id: z.string() }),
            ...errorResponses(400, 401, 403, 404),
          },
        },
      },
      async (request, reply) => {
        const webhook = await ownWebhook(request, request.params.webhook_id);
        const sent = await deps.testEvents.send(webhook);
        return reply.code(202).send({ delivery_id: sent.deliveryId, event_id: sent.eventId });
      },
    );
  };
}
