import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { DELIVERY_STATUSES } from '../../domain/delivery.js';
import { WEBHOOK_EVENT_TYPES } from '../../domain/events.js';
import { externalIdSchema } from '../../domain/ids.js';
import type { Webhook } from '../../domain/webhook.js';
import type { RangeReplayer, RangeReplaySpec } from '../../tasks/range-replay.js';
import { isLogCursor, type LoggedEvent, type RedisEventLog } from '../../store/event-log.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import type { Logger } from '../../logger.js';
import { principalOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid } from '../errors.js';
import { errorResponses, isoTime, noQueryParameters, queryParameters } from '../schemas.js';
import { vendorWebhook } from './deliveries.js';

/** Replays queued per second at most a range replay may ask for. */
const REPLAY_RATE_MAX = 10_000;
const FEED_LIMIT_MAX = 200;

const loggedEventSchema = z
  .object({
    cursor: z.string().describe('This event’s place in the feed: pass it as `after` to continue after it.'),
    event_id: z.string(),
    event_type: z.string(),
    delivery_id: z.string().describe('The delivery ingest made of it (its replays have ids of their own).'),
    accepted_at: z.string().describe('When the engine accepted it (ISO 8601).'),
    status: z
      .enum(DELIVERY_STATUSES)
      .describe(
        'Its delivery’s status: pending or retrying while it is being tried, delivered, dead (a dead letter), dropped ' +
          '(its webhook was deleted), or replayed; a replay’s outcome (delivered or dead) replaces the one before.',
      ),
    payload: z
      .record(z.string(), z.unknown())
      .describe('The body the receiver was sent (the event envelope), as JSON; verify nothing: it is no delivery.'),
  })
  .meta({ id: 'LoggedEvent' });

const feedQuery = queryParameters({
  after: z
    .string()
    .max(40)
    .optional()
    .describe('A cursor (an event’s, or next_cursor): the page starts after it. Absent: from the oldest kept.'),
  limit: z
    .string()
    .regex(/^\d{1,3}$/, `limit must be a whole number from 1 to ${FEED_LIMIT_MAX}`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= FEED_LIMIT_MAX, `limit must be a whole number from 1 to ${FEED_LIMIT_MAX}`)
    .optional()
    .describe(`How many, oldest first (1-${FEED_LIMIT_MAX}, default 50).`),
});

const replayFields = {
  since: isoTime('since').describe('Replay events accepted at or after this time (ISO 8601).'),
  until: isoTime('until').optional().describe('…and at or before this time (ISO 8601); absent: now.'),
  statuses: z
    .array(z.enum(DELIVERY_STATUSES, { error: `statuses must be among ${DELIVERY_STATUSES.join(', ')}` }))
    .min(1, 'statuses must name at least one status')
    .max(DELIVERY_STATUSES.length)
    .optional()
    .describe('Only events whose delivery has one of these statuses (as the event feed shows them); absent: any.'),
  event_types: z
    .array(z.enum(WEBHOOK_EVENT_TYPES, { error: `event_types must be among ${WEBHOOK_EVENT_TYPES.join(', ')}` }))
    .min(1, 'event_types must name at least one type')
    .max(WEBHOOK_EVENT_TYPES.length)
    .optional()
    .describe('Only events of these types; absent: any.'),
  dry_run: z
    .boolean({ error: 'dry_run must be true or false' })
    .optional()
    .describe('true: answer how many events would be replayed, and replay nothing.'),
  rate_per_second: z
    .number({ error: `rate_per_second must be an integer from 1 to ${REPLAY_RATE_MAX}` })
    .int({ error: `rate_per_second must be an integer from 1 to ${REPLAY_RATE_MAX}` })
    .min(1, { error: `rate_per_second must be an integer from 1 to ${REPLAY_RATE_MAX}` })
    .max(REPLAY_RATE_MAX, { error: `rate_per_second must be an integer from 1 to ${REPLAY_RATE_MAX}` })
    .optional()
    .describe(
      'Replays queued per second at most (the webhook’s own rate limit applies to their sending too); absent: no pace.',
    ),
};

const strictBody = { error: (issue: { code: string; keys?: string[] }) => bodyError(issue) };
function bodyError(issue: { code: string; keys?: string[] }): string {
  return issue.code === 'unrecognized_keys'
    ? `unknown field ${(issue.keys ?? []).map((k) => `"${k}"`).join(', ')}`
    : 'the body must be a JSON object';
}

const replayBody = z.strictObject(replayFields, strictBody);
const adminReplayBody = z.strictObject(
  {
    vendor_id: externalIdSchema.describe('The vendor whose webhooks’ events are replayed.'),
    webhook_id: z
      .string()
      .optional()
      .describe('Only this webhook of the vendor; absent: each of its webhooks (a task each).'),
    ...replayFields,
  },
  strictBody,
);

type ReplayBody = z.infer<typeof replayBody>;

/** A count's `capped`: what a count reads is bounded, so a long range answers a lower bound. */
const capped = z
  .boolean()
  .describe(
    'true: the count stopped after reading HOOKLINE_REPLAY_COUNT_MAX events of the range (10,000 by default), and ' +
      'count is a lower bound (at least that many); a replay still sends every event of the range.',
  );

const webhookParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID).') });

function toLoggedEvent(event: LoggedEvent): z.infer<typeof loggedEventSchema> {
  return {
    cursor: event.cursor,
    event_id: event.eventId,
    event_type: event.eventType,
    delivery_id: event.deliveryId,
    accepted_at: new Date(event.acceptedAtMs).toISOString(),
    status: event.status,
    payload: JSON.parse(event.body ?? '{}') as Record<string, unknown>,
  };
}

export interface WebhookEventRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  log: Pick<RedisEventLog, 'page' | 'defaultRetentionMs'>;
  /** false: HOOKLINE_EVENT_LOG=false, and every route here answers 409 event_log_disabled. */
  logOn: boolean;
  rangeReplayer: Pick<RangeReplayer, 'count' | 'vendorCount' | 'start'>;
  /** Operator replays are logged, with the key that started them. */
  logger: Logger;
  nowMs: () => number;
}

/**
 * A webhook's event log: the event feed receivers page to reconcile, and replays of a time range,
 * for vendors (`/vendors/v1/webhooks/{id}/…`) and operators (`/admin/v1/replays`).
 */
export function webhookEventRoutes(deps: WebhookEventRouteDeps): FastifyPluginAsyncZod {
  /** The oldest accept time the webhook's retention still covers. */
  const keptSinceMs = (webhook: Webhook) =>
    deps.nowMs() - Math.min(webhook.retentionMs ?? Infinity, deps.log.defaultRetentionMs);

  /** The replay a body asks for, within what the webhook keeps; 400 when its times are the wrong way round. */
  const specOf = (webhook: Webhook, body: ReplayBody): RangeReplaySpec => {
    const untilMs = body.until ?? deps.nowMs();
    if (body.since > untilMs) throw new ApiError('invalid_request', 'Invalid request body: since is after until');
    return {
      sinceMs: Math.max(body.since, keptSinceMs(webhook)),
      untilMs,
      ...(body.statuses === undefined ? {} : { statuses: [...new Set(body.statuses)] }),
      ...(body.event_types === undefined ? {} : { eventTypes: [...new Set(body.event_types)] }),
      ...(body.rate_per_second === undefined ? {} : { ratePerSecond: body.rate_per_second }),
    };
  };

  return async (app) => {
    const logged = (check: ReturnType<Authorizer>): ReturnType<Authorizer>[] => [
      check,
      async () => {
        if (!deps.logOn) throw new ApiError('event_log_disabled');
      },
    ];
    const onRead = logged(deps.authorize('vendor', { portal: 'read' }));
    const onReplay = logged(deps.authorize('vendor', { portal: 'replay' }));
    const onAdmin = logged(deps.authorize('admin'));

    app.get(
      '/vendors/v1/webhooks/:webhook_id/events',
      {
        onRequest: onRead,
        schema: {
          tags: ['events feed'],
          summary: 'The events matched to a webhook, in accept order (the event feed)',
          description:
            'Every event ingest matched to the webhook, oldest first, each with its delivery status and the body sent, kept for ' +
            'the retention period (the webhook’s retention, else HOOKLINE_RETENTION, 7 days by default). Page with `after`: ' +
            'keep next_cursor and ask again with it; has_more says whether more are there now. A receiver that was down, or ' +
            'suspects it lost events, pages from the last cursor it processed.',
          params: webhookParams,
          querystring: feedQuery,
          response: {
            200: z.object({
              events: z.array(loggedEventSchema),
              next_cursor: z
                .string()
                .nullable()
                .describe(
                  'Pass as `after` for the next page (also when has_more is false: poll with it later); null: nothing kept yet.',
                ),
              has_more: z.boolean().describe('true: more events follow now.'),
            }),
            ...errorResponses(400, 401, 403, 404, 409),
          },
        },
      },
      async (request) => {
        const webhook = await vendorWebhook(deps.webhooks, request, request.params.webhook_id);
        const { after, limit = 50 } = request.query;
        if (after !== undefined && !isLogCursor(after))
          throw new ApiError('invalid_request', 'Invalid query parameters: after is not a cursor this API answered');
        const page = await deps.log.page(webhook.id, {
          ...(after === undefined ? {} : { after }),
          sinceMs: keptSinceMs(webhook),
          limit,
          withBodies: true,
        });
        return {
          events: page.events.map(toLoggedEvent),
          next_cursor: page.events.at(-1)?.cursor ?? after ?? null,
          has_more: page.next !== undefined,
        };
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/replay',
      {
        onRequest: onReplay,
        schema: {
          tags: ['events feed'],
          summary: 'Replay the events of a time range',
          description:
            'Sends again every event the webhook’s feed holds from `since` to `until` (those of some statuses or types, if ' +
            'asked), each as a new delivery whose replay_of names the first. dry_run answers the count and sends nothing; a ' +
            'count reads at most HOOKLINE_REPLAY_COUNT_MAX events of the range (capped: true past it, count a lower bound), ' +
            'and a vendor’s counts share a budget of events read per second (429 replay_count_limited past it). ' +
            'Otherwise it runs as a task (GET /rental/v1/tasks/{task_id}, with progress; POST /vendors/v1/tasks/{task_id}/cancel ' +
            'stops it, and what was sent stays sent). A dead letter replayed this way leaves the dead letters. A vendor holds ' +
            'HOOKLINE_REPLAY_QUEUED_MAX range replays at most, waiting or running (429 replay_queue_full past it), and ' +
            'HOOKLINE_REPLAY_RUNNING_MAX of them run at once; workers take the vendors’ replays in turn, so the task stays ' +
            'pending until its turn.',
          params: webhookParams,
          querystring: noQueryParameters,
          body: replayBody,
          response: {
            200: z.object({ count: z.number().int().describe('Events a replay would send.'), capped }),
            202: z.object({
              task_id: z.string(),
              count: z.number().int().describe('Events the range held when the replay was started.'),
              capped,
            }),
            ...errorResponses(400, 401, 403, 404, 409, 413, 415, 429),
          },
        },
      },
      async (request, reply) => {
        const webhook = await vendorWebhook(deps.webhooks, request, request.params.webhook_id);
        const spec = specOf(webhook, request.body);
        const counted = await deps.rangeReplayer.vendorCount(webhook.vendorId, webhook.id, spec);
        if (counted === 'limited') throw new ApiError('replay_count_limited');
        if (request.body.dry_run === true) return reply.code(200).send(counted);
        const started = await deps.rangeReplayer.start(webhook.vendorId, [{ webhookId: webhook.id, spec }]);
        if ('full' in started) throw queueFull(started.full, 1);
        return reply.code(202).send({ task_id: started.taskIds[0]!, ...counted });
      },
    );

    app.post(
      '/admin/v1/replays',
      {
        onRequest: onAdmin,
        schema: {
          tags: ['operator'],
          summary: 'Replay the events of a time range for any vendor',
          description:
            'As POST /vendors/v1/webhooks/{webhook_id}/replay, for the vendor’s webhook named, or each of its webhooks (a task ' +
            'each, for those with events to replay). They count toward the vendor’s replay caps, all or none (429 ' +
            'replay_queue_full). Logged with the key as operator.replay_started.',
          querystring: noQueryParameters,
          body: adminReplayBody,
          response: {
            200: z.object({
              count: z.number().int(),
              capped: capped.describe('true: some webhook’s count is capped (see its own), so count is a lower bound.'),
              webhooks: z.array(z.object({ webhook_id: z.string(), count: z.number().int(), capped })),
            }),
            202: z.object({
              count: z.number().int(),
              capped: capped.describe('true: some webhook’s count is capped (see its own), so count is a lower bound.'),
              tasks: z.array(
                z.object({ webhook_id: z.string(), task_id: z.string(), count: z.number().int(), capped }),
              ),
            }),
            ...errorResponses(400, 401, 403, 404, 409, 413, 415, 429),
          },
        },
      },
      async (request, reply) => {
        const { vendor_id: vendorId, webhook_id: webhookId, ...body } = request.body;
        const webhooks = await vendorWebhooks(deps.webhooks, vendorId, webhookId);
        const counted = await Promise.all(
          webhooks.map(async (webhook) => {
            const spec = specOf(webhook, body);
            return { webhook, spec, ...(await deps.rangeReplayer.count(webhook.id, spec)) };
          }),
        );
        const count = counted.reduce((sum, c) => sum + c.count, 0);
        const anyCapped = counted.some((c) => c.capped);
        if (body.dry_run === true)
          return reply.code(200).send({
            count,
            capped: anyCapped,
            webhooks: counted.map((c) => ({ webhook_id: c.webhook.id, count: c.count, capped: c.capped })),
          });
        // The vendor's replays all, within its caps, or none.
        const starting = counted.filter((c) => c.count > 0);
        const started =
          starting.length === 0
            ? { taskIds: [] }
            : await deps.rangeReplayer.start(
                vendorId,
                starting.map((c) => ({ webhookId: c.webhook.id, spec: c.spec })),
              );
        if ('full' in started) throw queueFull(started.full, starting.length);
        const tasks = starting.map((c, i) => ({
          webhook_id: c.webhook.id,
          task_id: started.taskIds[i]!,
          count: c.count,
          capped: c.capped,
        }));
        logOperator(deps.logger, request, {
          vendorId,
          webhookId: webhookId ?? null,
          count,
          taskIds: tasks.map((t) => t.task_id),
        });
        return reply.code(202).send({ count, capped: anyCapped, tasks });
      },
    );
  };
}

/** How long a client refused for a full replay queue waits before asking again: replays take a while. */
const QUEUE_FULL_RETRY_AFTER_S = 10;

/** 429 replay_queue_full: the vendor holds `held` replays, and `more` would take it past its cap. */
function queueFull(held: number, more: number): ApiError {
  return new ApiError(
    'replay_queue_full',
    `This vendor has ${held} range replays waiting or running; ${more === 1 ? 'one more' : `${more} more`} would pass ` +
      'its cap (HOOKLINE_REPLAY_QUEUED_MAX). Wait for one to end, or cancel one (POST /vendors/v1/tasks/{task_id}/cancel)',
    {},
    QUEUE_FULL_RETRY_AFTER_S,
  );
}

/** The vendor's webhook named, or all of its webhooks; 400/404 for a bad or unknown id. */
async function vendorWebhooks(
  webhooks: WebhookRegistry,
  vendorId: string,
  webhookId: string | undefined,
): Promise<Webhook[]> {
  if (webhookId === undefined) return webhooks.list(vendorId);
  const found = await webhooks.get(vendorId, checkedUuid(webhookId, 'invalid_webhook_id'));
  if (!found) throw new ApiError('webhook_not_found');
  return [found];
}

function logOperator(logger: Logger, request: FastifyRequest, fields: Record<string, unknown>): void {
  const { keyId, name } = principalOf(request);
  logger.info(
    { event: 'operator.replay_started', keyId, keyName: name, ...fields },
    'an operator replayed a range of events',
  );
}
