import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EXTERNAL_ID_RE } from '../../domain/ids.js';
import type { DeadLetterReplayer } from '../../tasks/replay.js';
import type { Logger } from '../../logger.js';
import {
  WEBHOOK_STATES,
  type OperatorViews,
  type WebhookState,
  type WebhookStatus,
} from '../../store/operator-views.js';
import type { DeliveryHistory, DeliverySummary } from '../../store/delivery-log.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import { principalOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid, isoOrNull } from '../errors.js';
import { errorResponses, noQueryParameters, queryParameters } from '../schemas.js';
import { deliveryResources, deliverySchema } from './deliveries.js';

const iso = isoOrNull;

const webhookStatusSchema = z
  .object({
    webhook_id: z.string(),
    vendor_id: z.string(),
    event_type: z.string(),
    callback_url: z.string(),
    state: z
      .enum(WEBHOOK_STATES)
      .describe(
        'disabled (by the engine: 410 Gone, or failing for the sustained-failure window), circuit_open (a worker holds ' +
          'deliveries to its endpoint back), failing (its latest attempts failed), healthy, or paused (by its vendor).',
      ),
    needs_attention: z.boolean().describe('Disabled by the engine, circuit open, failing, or holding dead letters.'),
    disabled_reason: z.enum(['gone', 'failing', 'paused']).nullable(),
    disabled_at: z.string().nullable(),
    failing_since: z
      .string()
      .nullable()
      .describe('When its current run of failed attempts began; null after a success.'),
    dead_letters: z.number().int().describe('Dead letters waiting for a replay.'),
    last_outcome: z
      .string()
      .nullable()
      .describe('The newest outcome among its recent deliveries (delivered, http_5xx, timeout, …).'),
    last_status_code: z.number().int().nullable(),
    last_attempt_at: z.string().nullable(),
    circuit: z
      .object({
        state: z.enum(['open', 'half_open']),
        reason: z
          .string()
          .describe('failure_rate, consecutive_failures, consecutive_timeouts, probe_failed, or probing.'),
        endpoint: z
          .string()
          .describe('The receiver origin the circuit guards (the circuit of this vendor’s webhooks on it).'),
        opened_at: z.string(),
        probe_at: z.string().describe('When a worker lets the next probe through.'),
      })
      .nullable()
      .describe('Set while a worker holds deliveries to the endpoint back; null when no circuit is open.'),
  })
  .meta({ id: 'WebhookStatus' });

export function toWebhookStatus(s: WebhookStatus): z.infer<typeof webhookStatusSchema> {
  const { webhook, circuit } = s;
  return {
    webhook_id: webhook.id,
    vendor_id: webhook.vendorId,
    event_type: webhook.eventType,
    callback_url: webhook.callbackUrl,
    state: s.state,
    needs_attention: s.needsAttention,
    disabled_reason: webhook.disabled?.reason ?? null,
    disabled_at: iso(webhook.disabled?.atMs),
    failing_since: iso(s.failingSinceMs),
    dead_letters: s.deadLetters,
    last_outcome: s.last?.outcome ?? null,
    last_status_code: s.last?.statusCode ?? null,
    last_attempt_at: iso(s.last?.atMs),
    circuit:
      circuit === undefined
        ? null
        : {
            state: circuit.state,
            reason: circuit.reason,
            endpoint: circuit.endpoint,
            opened_at: iso(circuit.openedAtMs) ?? '',
            probe_at: iso(circuit.probeAtMs) ?? '',
          },
  };
}

/** A dead letter in the cross-webhook view: the delivery, and whose it is. */
const operatorDeadLetterSchema = deliverySchema
  .extend({ webhook_id: z.string(), vendor_id: z.string() })
  .meta({ id: 'OperatorDeadLetter' });

/** Dead letters across webhooks as GET /admin/v1/dead-letters answers them (and `hookline dlq list --json` prints them). */
export async function operatorDeadLetters(
  history: Pick<DeliveryHistory, 'eventBodies'>,
  dead: readonly DeliverySummary[],
): Promise<z.infer<typeof operatorDeadLetterSchema>[]> {
  const shown = await deliveryResources(history, dead);
  return dead.map((d, i) => ({ ...shown[i]!, webhook_id: d.webhookId, vendor_id: d.vendorId }));
}

const vendorFilter = z
  .string()
  .regex(EXTERNAL_ID_RE, 'vendor_id must be 1-128 characters: letters, digits and . _ : @ -')
  .optional();
const limitOf = (max: number, fallback: number) =>
  z
    .string()
    .regex(/^\d{1,4}$/, `limit must be a whole number from 1 to ${max}`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= max, `limit must be a whole number from 1 to ${max}`)
    .optional()
    .describe(`How many (1-${max}, default ${fallback}).`);

const webhooksQuery = queryParameters({
  vendor_id: vendorFilter.describe('Only this vendor’s webhooks.'),
  state: z
    .string()
    .refine((text) => text.split(',').every((s) => (WEBHOOK_STATES as readonly string[]).includes(s)), {
      message: `state must be one or more (comma-separated) of ${WEBHOOK_STATES.join(', ')}`,
    })
    .transform((text) => text.split(',') as WebhookState[])
    .optional()
    .describe(`Only webhooks in these states (comma-separated: ${WEBHOOK_STATES.join(', ')}).`),
  needs_attention: z
    .enum(['true', 'false'], { error: 'needs_attention must be true or false' })
    .transform((text) => text === 'true')
    .optional()
    .describe('true: only webhooks that are disabled by the engine, circuit open, failing, or holding dead letters.'),
  limit: limitOf(1000, 100),
});

const deadLettersQuery = queryParameters({
  vendor_id: vendorFilter.describe('Only this vendor’s dead letters.'),
  webhook_id: z.string().optional().describe('Only this webhook’s dead letters.'),
  limit: limitOf(1000, 50),
});

const webhookParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID), of any vendor.') });
const deliveryParams = webhookParams.extend({
  delivery_id: z.string().describe('The dead letter’s delivery id (UUID).'),
});

export interface OperatorRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  views: OperatorViews;
  /** Where the dead letters' machine and deployment ids are read from. */
  history: Pick<DeliveryHistory, 'eventBodies'>;
  replayer: Pick<DeadLetterReplayer, 'replayOne' | 'startReplayAll'>;
  /** Operator actions are logged, with the key that took them. */
  logger: Logger;
}

/**
 * The operator's API under `/admin/v1` (role admin): every vendor's webhooks with their state,
 * failing ones first; dead letters across webhooks; and the actions a runbook needs on any vendor's
 * webhook (enable, replay), each logged with the key that took it.
 */
export function operatorRoutes(deps: OperatorRouteDeps): FastifyPluginAsyncZod {
  async function anyWebhook(webhookId: string): Promise<WebhookStatus> {
    const found = await deps.views.webhook(checkedUuid(webhookId, 'invalid_webhook_id'));
    if (!found) throw new ApiError('webhook_not_found');
    return found;
  }
  const logAction = (request: FastifyRequest, event: string, fields: Record<string, unknown>, message: string) => {
    const { keyId, name } = principalOf(request);
    deps.logger.info({ event, keyId, keyName: name, ...fields }, message);
  };

  return async (app) => {
    const onRequest = deps.authorize('admin');
    const tags = ['operator'];

    app.get(
      '/admin/v1/webhooks',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Every vendor’s webhooks with their state, most urgent first',
          description:
            'Sorted disabled, circuit_open, failing, then healthy ones holding dead letters, paused and healthy; within a state, ' +
            'more dead letters and longer failure runs first. total counts every match; webhooks holds the first `limit`.',
          querystring: webhooksQuery,
          response: {
            200: z.object({ total: z.number().int(), webhooks: z.array(webhookStatusSchema) }),
            ...errorResponses(400, 401, 403),
          },
        },
      },
      async (request) => {
        const { vendor_id: vendorId, state, needs_attention: needsAttention, limit = 100 } = request.query;
        const found = await deps.views.webhooks({
          ...(vendorId === undefined ? {} : { vendorId }),
          ...(state === undefined ? {} : { states: state }),
          ...(needsAttention === undefined ? {} : { needsAttention }),
        });
        return { total: found.length, webhooks: found.slice(0, limit).map(toWebhookStatus) };
      },
    );

    app.get(
      '/admin/v1/webhooks/:webhook_id',
      {
        onRequest,
        schema: {
          tags,
          summary: 'One webhook of any vendor, with its state',
          description: 'The same fields as the list, for one webhook whoever owns it.',
          params: webhookParams,
          querystring: noQueryParameters,
          response: { 200: webhookStatusSchema, ...errorResponses(400, 401, 403, 404) },
        },
      },
      async (request) => toWebhookStatus(await anyWebhook(request.params.webhook_id)),
    );

    app.get(
      '/admin/v1/dead-letters',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Dead letters across webhooks, newest first',
          description:
            'Of one webhook, a vendor’s webhooks, or every webhook; each with the webhook and vendor it belongs to.',
          querystring: deadLettersQuery,
          response: {
            200: z.object({ dead_letters: z.array(operatorDeadLetterSchema) }),
            ...errorResponses(400, 401, 403, 404),
          },
        },
      },
      async (request) => {
        const { vendor_id: vendorId, webhook_id: webhookId, limit = 50 } = request.query;
        if (webhookId !== undefined) await anyWebhook(webhookId);
        const dead = await deps.views.deadLetters({
          limit,
          ...(vendorId === undefined ? {} : { vendorId }),
          ...(webhookId === undefined ? {} : { webhookId: webhookId.toLowerCase() }),
        });
        return { dead_letters: await operatorDeadLetters(deps.history, dead) };
      },
    );

    app.post(
      '/admin/v1/webhooks/:webhook_id/enable',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Enable any vendor’s webhook',
          description:
            'Re-enables a webhook the engine disabled (or its vendor paused); its failure run starts over, and the deliveries held while it was paused go out at once. Logged with the key.',
          params: webhookParams,
          querystring: noQueryParameters,
          response: { 200: webhookStatusSchema, ...errorResponses(400, 401, 403, 404) },
        },
      },
      async (request) => {
        const before = await anyWebhook(request.params.webhook_id);
        const { webhook } = before;
        const result = await deps.webhooks.update(webhook.vendorId, webhook.id, { enabled: true });
        if (!result.ok) throw new ApiError('webhook_not_found');
        logAction(
          request,
          'operator.webhook_enabled',
          { webhookId: webhook.id, vendorId: webhook.vendorId, wasDisabled: webhook.disabled?.reason ?? null },
          'an operator enabled a webhook',
        );
        return toWebhookStatus(await anyWebhook(webhook.id));
      },
    );

    app.post(
      '/admin/v1/webhooks/:webhook_id/dead-letters/replay',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Replay every dead letter of any vendor’s webhook',
          description:
            'Runs as a task (GET /rental/v1/tasks/{task_id}); it ends when every replay has an outcome. Logged with the key.',
          params: webhookParams,
          querystring: noQueryParameters,
          response: { 202: z.object({ task_id: z.string() }), ...errorResponses(400, 401, 403, 404) },
        },
      },
      async (request, reply) => {
        const { webhook } = await anyWebhook(request.params.webhook_id);
        const taskId = await deps.replayer.startReplayAll(webhook.vendorId, webhook.id);
        logAction(
          request,
          'operator.dead_letters_replayed',
          { webhookId: webhook.id, vendorId: webhook.vendorId, taskId },
          'an operator replayed dead letters',
        );
        return reply.code(202).send({ task_id: taskId });
      },
    );

    app.post(
      '/admin/v1/webhooks/:webhook_id/dead-letters/:delivery_id/replay',
      {
        onRequest,
        schema: {
          tags,
          summary: 'Replay one dead letter of any vendor’s webhook',
          description: 'Queues a new delivery of the same event; answers its id. Logged with the key.',
          params: deliveryParams,
          querystring: noQueryParameters,
          response: {
            202: z.object({ delivery_id: z.string(), replay_of: z.string() }),
            ...errorResponses(400, 401, 403, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const { webhook } = await anyWebhook(request.params.webhook_id);
        const deliveryId = checkedUuid(request.params.delivery_id, 'invalid_delivery_id');
        const result = await deps.replayer.replayOne(webhook.id, deliveryId);
        if (!result.ok) throw new ApiError(result.reason === 'not_found' ? 'delivery_not_found' : 'not_dead_letter');
        logAction(
          request,
          'operator.dead_letter_replayed',
          { webhookId: webhook.id, vendorId: webhook.vendorId, deliveryId, replayId: result.deliveryId },
          'an operator replayed a dead letter',
        );
        return reply.code(202).send({ delivery_id: result.deliveryId, replay_of: deliveryId });
      },
    );
  };
}
