import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { eventCatalogue } from '../../domain/event-catalogue.js';
import { WEBHOOK_EVENT_TYPES } from '../../domain/events.js';
import { noQueryParameters } from '../schemas.js';

const catalogueSchema = z
  .object({
    event_types: z.array(
      z.object({
        event_type: z.enum(WEBHOOK_EVENT_TYPES),
        description: z.string().describe('When the event is sent and what its data is.'),
        schema: z
          .record(z.string(), z.unknown())
          .describe('JSON Schema (draft 2020-12) of the whole body a webhook of this type receives.'),
        sample: z.record(z.string(), z.unknown()).describe('A body as it is sent.'),
      }),
    ),
  })
  .meta({ id: 'EventCatalogue' });

/**
 * `GET /portal/v1/catalogue`: the event types with their schemas and samples. Public facts (the
 * OpenAPI document's webhooks section says the same), so no key or session is needed; computed once.
 */
export function catalogueRoutes(): FastifyPluginAsyncZod {
  const body = { event_types: eventCatalogue() };
  return async (app) => {
    app.get(
      '/portal/v1/catalogue',
      {
        schema: {
          tags: ['portal'],
          security: [],
          summary: 'The event catalogue',
          description:
            'The six event types a webhook can receive, each with its description, the JSON Schema of the body it receives ' +
            '(generated from the schemas the engine validates with) and a sample body. No key needed: the portal’s catalogue page reads it.',
          querystring: noQueryParameters,
          response: { 200: catalogueSchema },
        },
      },
      async () => body,
    );
  };
}
