import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { nestingProblem } from '../../domain/event.js';
import { eventCatalogue } from '../../domain/event-catalogue.js';
import { explainFilter, type FilterExplanation } from '../../domain/filter.js';
import { filterViewSchema, nullableFilterSchema } from '../../domain/webhook.js';
import type { RedisRecentEvents } from '../../store/recent-events.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import { vendorOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

const idParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID) as returned on registration.') });

const EVENT_PROBLEM =
  'event must be an object with data (and optionally event_type, event_id, timestamp, version), as a webhook receives it';

const bodySchema = z.strictObject(
  {
    filter: nullableFilterSchema
      .optional()
      .describe('A filter to try instead of the webhook’s own; null: no filter. Absent: the webhook’s filter.'),
    event: z
      .record(z.string(), z.unknown(), { error: EVENT_PROBLEM })
      .refine((event) => 'data' in event, EVENT_PROBLEM)
      // The answer echoes the event: one nested past what ingest takes could not be serialised.
      .superRefine((event, ctx) => {
        for (const [key, value] of Object.entries(event)) {
          const problem = nestingProblem(value, `event.${key}`);
          if (problem !== undefined) return ctx.addIssue({ code: 'custom', message: problem });
        }
      })
      .optional()
      .describe(
        'The body to test, as a webhook receives it. Absent: the catalogue’s sample of the webhook’s event type.',
      ),
    recent: z
      .literal(true, { error: 'recent must be true' })
      .optional()
      .describe(
        'true: test the newest event ingest matched to this webhook lately (kept, whether it passed or not, for webhooks with a filter: the last 5, for a day).',
      ),
  },
  {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown field ${issue.keys.map((k) => `"${k}"`).join(', ')}`
        : 'the body must be a JSON object',
  },
);

interface ExplanationView {
  matched: boolean;
  test: string;
  found_kind?: 'value' | 'missing' | 'object' | 'list';
  found?: string | number | boolean | null;
  parts?: ExplanationView[];
}

const explanationSchema: z.ZodType<ExplanationView> = z
  .object({
    matched: z.boolean(),
    test: z.string().describe('The node in words, e.g. `data.status == "unavailable"`, `all of 2`, `any of 3`, `not`.'),
    found_kind: z
      .enum(['value', 'missing', 'object', 'list'])
      .optional()
      .describe('For a comparison: what its path leads to.'),
    found: z
      .union([z.string(), z.number(), z.boolean(), z.null()])
      .optional()
      .describe('The value found, when it is one.'),
    get parts() {
      return z.array(explanationSchema).optional().describe('For all of / any of / not: each part, explained.');
    },
  })
  .meta({ id: 'FilterExplanation' });

function view(explanation: FilterExplanation): ExplanationView {
  return {
    matched: explanation.matched,
    test: explanation.test,
    ...(explanation.foundKind === undefined ? {} : { found_kind: explanation.foundKind }),
    ...(explanation.foundKind === 'value' ? { found: explanation.found ?? null } : {}),
    ...(explanation.parts === undefined ? {} : { parts: explanation.parts.map(view) }),
  };
}

export interface FilterTestRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  recentEvents: Pick<RedisRecentEvents, 'latest'>;
}

/**
 * `POST /vendors/v1/webhooks/{id}/filter-test`: a dry run of a payload filter (the webhook's own or
 * a proposed one) against an event, saying node by node why it matched or not. Nothing is stored
 * or sent, so a `read` portal session may use it.
 */
export function filterTestRoutes(deps: FilterTestRouteDeps): FastifyPluginAsyncZod {
  const samples = new Map(eventCatalogue().map((entry) => [entry.event_type, entry.sample]));
  return async (app) => {
    app.post(
      '/vendors/v1/webhooks/:webhook_id/filter-test',
      {
        onRequest: deps.authorize('vendor', { portal: 'read' }),
        schema: {
          tags: ['webhooks'],
          summary: 'Try a payload filter on an event',
          description:
            'Evaluates the webhook’s filter, or the one in the body, against the event in the body, the newest event ingest matched ' +
            'to the webhook (recent: true), or the catalogue’s sample of the webhook’s event type, and answers whether it matched and why, node by node with the value each path led to. ' +
            'A dry run: nothing is stored or sent.',
          params: idParams,
          querystring: noQueryParameters,
          body: bodySchema,
          response: {
            200: z.object({
              webhook_id: z.string(),
              matched: z.boolean().describe('Whether the event would be delivered.'),
              filter: filterViewSchema.nullable().describe('The filter evaluated; null: none (every event matches).'),
              source: z
                .enum(['request', 'recent', 'sample'])
                .describe('Where the event came from: the body, the recent events, or the catalogue.'),
              event: z.record(z.string(), z.unknown()).describe('The event evaluated.'),
              explanation: explanationSchema.nullable().describe('Why, node by node; null without a filter.'),
            }),
            ...errorResponses(400, 401, 403, 404, 413, 415, 500),
          },
        },
      },
      async (request) => {
        const webhookId = checkedUuid(request.params.webhook_id, 'invalid_webhook_id');
        const webhook = await deps.webhooks.get(vendorOf(request), webhookId);
        if (!webhook) throw new ApiError('webhook_not_found');
        const filter = request.body.filter === undefined ? (webhook.filter ?? null) : request.body.filter;
        const { event: given, recent } = request.body;
        if (given !== undefined && recent === true)
          throw new ApiError('invalid_request', 'Invalid request body: give event or recent, not both');
        let source: 'request' | 'recent' | 'sample' = given === undefined ? 'sample' : 'request';
        let event = given ?? samples.get(webhook.eventType)!;
        if (recent === true) {
          const body = await deps.recentEvents.latest(webhookId);
          if (body === undefined) {
            throw new ApiError(
              'invalid_request',
              'No recent event for this webhook: they are kept, for a day, only for webhooks that have a filter',
            );
          }
          source = 'recent';
          event = JSON.parse(body) as Record<string, unknown>;
        }
        const explanation = filter === null ? null : view(explainFilter(filter, event));
        return {
          webhook_id: webhookId,
          matched: explanation?.matched ?? true,
          filter,
          source,
          event,
          explanation,
        };
      },
    );
  };
}
