import { validatorCompiler, type FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EVENT_BATCH_SIZE_MAX, eventResultSchema, ingestEventSchema } from '../../domain/event.js';
import type { Ingestor, IngestTrace } from '../../ingest/ingest.js';
import { parseTraceparent } from '../../domain/trace.js';
import type { EventBudget } from '../../store/rate-limiter.js';
import { principalOf, type Authorizer } from '../auth.js';
import { ApiError, errorBody } from '../errors.js';
import { errorResponses, errorSchema, noQueryParameters } from '../schemas.js';

/** Largest request body of the ingest route: 1000 events of a few KiB each fit with room to spare. */
export const EVENTS_BODY_LIMIT_BYTES = 5 * 1024 * 1024;

/** What the OpenAPI document shows: one event, or a batch of them. */
const documentedBody = z.union([
  ingestEventSchema,
  z.object({ events: z.array(ingestEventSchema).min(1).max(EVENT_BATCH_SIZE_MAX) }).meta({
    description: `A batch of 1-${EVENT_BATCH_SIZE_MAX} events, each accepted, duplicate or rejected on its own.`,
  }),
]);

/**
 * What the route validates: only the outer shape. Each event is validated by the Ingestor, so one
 * bad event is rejected alone instead of failing the whole batch with a 400. A body with an
 * `events` field is a batch (and holds nothing else); any other object is one event.
 */
const outerShape = z
  .record(z.string(), z.unknown(), { error: 'the body must be a JSON object: one event, or { "events": [ … ] }' })
  .superRefine((body, ctx) => {
    if (!('events' in body)) return;
    const beside = Object.keys(body).filter((key) => key !== 'events');
    if (beside.length > 0) {
      // A field meant for the events (vendor_id, say) would otherwise be silently ignored.
      ctx.addIssue({
        code: 'custom',
        message: `unknown field ${beside.map((key) => JSON.stringify(key)).join(', ')} (a batch is { "events": [ … ] } alone)`,
      });
    }
    const events = body.events;
    const problem = !Array.isArray(events)
      ? 'events must be an array of event objects'
      : events.length === 0
        ? 'events must hold at least one event'
        : events.length > EVENT_BATCH_SIZE_MAX
          ? `events: a batch holds at most ${EVENT_BATCH_SIZE_MAX} events, got ${events.length}; split it`
          : undefined;
    if (problem !== undefined) ctx.addIssue({ code: 'custom', path: ['events'], message: problem });
  });

const resultCounts = {
  results: z.array(eventResultSchema).describe('One result per event, in request order.'),
  accepted: z.int().min(0),
  duplicates: z.int().min(0),
  rejected: z.int().min(0),
};

const acceptedResponse = z.object(resultCounts);

/**
 * 400 when no event of the request was taken: an error, so that a producer which treats any 2xx as
 * done (and retries only 5xx) notices, and still with every event's reason.
 */
const allRejectedResponse = errorSchema.extend({ code: z.literal('events_rejected'), ...resultCounts }).meta({
  id: 'EventsRejected',
  description: 'Every event of the request was rejected: nothing was ingested; each result names its reason.',
});

/** The ingest route's own limit: events (not requests) per second per API key. */
export interface IngestRateLimit {
  budget: EventBudget;
  /** Events per second per API key; 0 turns the limit off. */
  perSecond: number;
  nowMs: () => number;
}

export interface EventRouteDeps {
  authorize: Authorizer;
  ingestor: Pick<Ingestor, 'ingest'>;
  ingestRateLimit?: IngestRateLimit;
}

/**
 * `POST /internal/v1/events` (role events:write): producers hand over one event or a batch. Exempt
 * from the per-key request limit, since a producer may post each event as it happens; bounded by
 * `ingestRateLimit` in events per second instead.
 */
export function eventRoutes(deps: EventRouteDeps): FastifyPluginAsyncZod {
  const limit = deps.ingestRateLimit && deps.ingestRateLimit.perSecond > 0 ? deps.ingestRateLimit : undefined;
  return async (app) => {
    app.post(
      '/internal/v1/events',
      {
        onRequest: deps.authorize('events:write', { requestLimited: false }),
        bodyLimit: EVENTS_BODY_LIMIT_BYTES,
        // The body schema documents the events; validation checks only the outer shape (see outerShape).
        // Fastify compiles each part on its own and hands over that part's schema (typed as the route's).
        validatorCompiler: (route) =>
          validatorCompiler({
            ...route,
            schema: route.httpPart === 'body' ? outerShape : (route.schema as unknown as z.ZodType),
          }),
        schema: {
          tags: ['ingest'],
          summary: 'Ingest events',
          description:
            `One event, or { "events": [ … ] } with 1-${EVENT_BATCH_SIZE_MAX} events (body at most 5 MiB). ` +
            'Answers 202 with a result per event: accepted (with the number of deliveries created), duplicate ' +
            '(the event_id was ingested before; nothing is done again) or rejected with a reason. Invalid events do not ' +
            'affect the valid ones. When every event is rejected the answer is 400 events_rejected, with the same results: ' +
            'sending the request again cannot help. On 202 the accepted events are durable and their deliveries exist; on a 5xx nothing ' +
            'was acknowledged and re-sending the same events (same event_id) is safe. Not subject to the per-key request ' +
            'limit: a request whose events would take its key past the ingest limit (events per second) answers 429 ' +
            'with Retry-After: 1 and none of its events is ingested (a request into an otherwise empty second always passes). ' +
            'A W3C traceparent header (and tracestate) puts the events’ ingest and deliveries in the caller’s trace; one that ' +
            'is not valid is ignored.',
          querystring: noQueryParameters,
          body: documentedBody,
          response: {
            202: acceptedResponse,
            ...errorResponses(401, 403, 413, 415, 429, 500, 503),
            400: z.union([allRejectedResponse, errorSchema]),
          },
        },
      },
      async (request, reply) => {
        // Typed by the documented schema, but only the outer shape has been checked.
        const body = request.body as unknown as Record<string, unknown>;
        const events = Array.isArray(body.events) ? (body.events as unknown[]) : [body];
        if (
          limit &&
          !(await limit.budget.take(principalOf(request).keyId, events.length, limit.perSecond, limit.nowMs()))
        ) {
          void reply.header('retry-after', '1');
          throw new ApiError(
            'rate_limited',
            `Ingest rate limit of ${limit.perSecond} events per second for this API key exceeded; retry after 1 s`,
          );
        }
        const results = await deps.ingestor.ingest(events, 'http', requestTrace(request.headers));
        const count = (status: string) => results.filter((r) => r.status === status).length;
        const answer = {
          results,
          accepted: count('accepted'),
          duplicates: count('duplicate'),
          rejected: count('rejected'),
        };
        if (answer.rejected === results.length) {
          const first = results[0]?.reason ?? '';
          const error =
            results.length === 1
              ? `The event was rejected: ${first}`
              : `All ${results.length} events were rejected (see results); the first: ${first}`;
          return reply.code(400).send({ ...errorBody('events_rejected', error), code: 'events_rejected', ...answer });
        }
        return reply.code(202).send(answer);
      },
    );
  };
}

/**
 * The producer's trace from the W3C Trace Context headers: ingest's span continues it, and the
 * deliveries carry it. One `traceparent` only (a repeated header is invalid, so ignored, as is a
 * malformed one); `tracestate` is passed on as given, up to the specification's 512 characters.
 */
function requestTrace(headers: Record<string, string | string[] | undefined>): IngestTrace | undefined {
  const parent = parseTraceparent(headers.traceparent);
  if (parent === undefined) return undefined;
  const state = headers.tracestate;
  return typeof state === 'string' && state.length > 0 && state.length <= 512
    ? { parent, traceState: state }
    : { parent };
}
