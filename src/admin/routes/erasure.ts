import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { externalIdSchema, isUuid } from '../../domain/ids.js';
import type { Eraser } from '../../tasks/erasure.js';
import type { Logger } from '../../logger.js';
import { principalOf, type Authorizer } from '../auth.js';
import { ApiError } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

export interface ErasureRouteDeps {
  authorize: Authorizer;
  eraser: Pick<Eraser, 'startEvent' | 'startVendor'>;
  logger: Logger;
}

const taskAnswer = z.object({
  task_id: z.string().describe('The erasure task: GET /rental/v1/tasks/{task_id} until it ends.'),
});

/**
 * Erasure for operators (role admin): one event's payload and records everywhere, or all of a
 * vendor's data. Each runs as a task on a worker and is logged as operator.erase with the key.
 */
export function erasureRoutes(deps: ErasureRouteDeps): FastifyPluginAsyncZod {
  return async (app) => {
    const onRequest = deps.authorize('admin');
    const tags = ['operator'];

    app.delete(
      '/admin/v1/events/:event_id',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Erase one event everywhere',
          description:
            'Removes the event’s payload and records from every webhook it was matched to: the event feed, delivery records ' +
            '(its replays’ too), dead letters, queued deliveries, the filter dry run’s recent events, and its entries in the ' +
            'ingest streams (acknowledged, so no consumer holds one) and the dead-letter streams. Runs as a task; a second ' +
            'pass, once attempts in flight have ended, removes what they wrote. Kept: the ingest dedupe mark of the id (no ' +
            'payload) and the platform’s read models (current state, no event).',
          params: z.object({ event_id: z.string().describe('The event id (UUID).') }),
          querystring: noQueryParameters,
          response: { 202: taskAnswer, ...errorResponses(400, 401, 403) },
        },
      },
      async (request, reply) => {
        const eventId = request.params.event_id;
        if (!isUuid(eventId)) throw new ApiError('invalid_request', 'Invalid event_id: expected a UUID');
        const { keyId, name } = principalOf(request);
        const taskId = await deps.eraser.startEvent(eventId.toLowerCase(), keyId);
        deps.logger.info(
          { event: 'operator.erase', kind: 'event', eventId: eventId.toLowerCase(), taskId, keyId, keyName: name },
          'an operator erased an event',
        );
        return reply.code(202).send({ task_id: taskId });
      },
    );

    app.delete(
      '/admin/v1/vendors/:vendor_id/data',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Erase everything of a vendor',
          description:
            'Deletes the vendor’s webhooks and everything under them (event feed, payloads, delivery records, dead letters, ' +
            'FIFO lines, stats), its events in the ingest and dead-letter streams, its queued deliveries, portal sessions, ' +
            'API keys, replay tasks and endpoint state. Runs as a task, in two passes like an event’s erasure. Registering ' +
            'webhooks for the vendor again starts afresh.',
          params: z.object({ vendor_id: externalIdSchema.describe('The vendor id.') }),
          querystring: noQueryParameters,
          response: { 202: taskAnswer, ...errorResponses(400, 401, 403) },
        },
      },
      async (request, reply) => {
        const vendorId = request.params.vendor_id;
        const { keyId, name } = principalOf(request);
        const taskId = await deps.eraser.startVendor(vendorId, keyId);
        deps.logger.info(
          { event: 'operator.erase', kind: 'vendor', vendorId, taskId, keyId, keyName: name },
          "an operator erased a vendor's data",
        );
        return reply.code(202).send({ task_id: taskId });
      },
    );
  };
}
