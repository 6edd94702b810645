import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { endpointKey } from '../../domain/endpoint.js';
import { WEBHOOK_ORDERINGS } from '../../domain/webhook.js';
import type { RedisCircuitLog } from '../../store/circuits.js';
import type { RedisEndpointFlow } from '../../store/endpoint-flow.js';
import type { EndpointStatsReader, StatsWindow } from '../../store/endpoint-stats.js';
import type { RedisFifoLines } from '../../store/fifo-lines.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import { vendorOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

const windowSchema = z
  .object({
    attempts: z
      .number()
      .int()
      .describe(
        'Attempts sent (delivered + failed); attempts held back by an open circuit or a disabled webhook are not.',
      ),
    delivered: z.number().int().describe('Attempts answered 2xx.'),
    failed: z.number().int().describe('Every other attempt sent: 3xx, 4xx, 5xx, timeouts and connection errors.'),
    success_rate: z.number().nullable().describe('delivered ÷ attempts, from 0 to 1; null without attempts.'),
    p50_ms: z
      .number()
      .int()
      .nullable()
      .describe(
        'Median response time (ms) of the attempts answered or timed out, from a histogram with bounds 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10 and 30 s: it lies in the same bucket as the true value. null when there were none.',
      ),
    p95_ms: z.number().int().nullable().describe('95th percentile response time (ms), as p50_ms.'),
  })
  .meta({ id: 'EndpointStatsWindow' });

const statsSchema = z
  .object({
    webhook_id: z.string(),
    circuit: z
      .enum(['closed', 'open', 'half_open'])
      .describe(
        'The circuit of the webhook’s endpoint (this vendor’s webhooks on its URL origin; other vendors on the origin have circuits of their own). ' +
          'open: workers hold deliveries to the endpoint back after repeated failures; half_open: a probe is under way; closed: deliveries flow.',
      ),
    last_attempt: z
      .object({
        attempted_at: z.string(),
        outcome: z
          .string()
          .describe(
            'delivered, http_3xx, http_4xx, http_5xx, timeout, dns, connect, tls, ssrf_blocked, network or auth.',
          ),
        status_code: z.number().int().nullable(),
        duration_ms: z.number().int(),
      })
      .nullable()
      .describe('The newest attempt sent in the last 7 days; null when none.'),
    windows: z
      .object({ hour: windowSchema, day: windowSchema })
      .describe(
        'hour: the last 60 minutes (its percentiles: the 10-minute slots those minutes fall in, 60 to 69 minutes); day: the ' +
          'current clock hour and the 24 before it. Counts may trail the attempts by a second or two: workers write them once a second.',
      ),
    rate_limit_per_second: z
      .number()
      .int()
      .nullable()
      .describe('The webhook’s send rate limit (sends per second over all workers); null: unlimited.'),
    send_rate_per_second: z
      .number()
      .describe(
        'Attempts sent in the last full minute (the one before the current), divided by 60: the recent send rate, to hold against the limit.',
      ),
    ordering: z
      .enum(WEBHOOK_ORDERINGS)
      .describe('The webhook’s ordering: fifo (one delivery at a time, in accept order) or none.'),
    fifo_line: z
      .object({
        length: z
          .number()
          .int()
          .describe(
            'Deliveries waiting in the webhook’s lines (all of them, with an ordering key), those in flight included.',
          ),
        oldest_waiting_ms: z
          .number()
          .int()
          .nullable()
          .describe(
            'How long ago the oldest head (the oldest delivery waiting) was accepted, in ms; null when the lines are empty.',
          ),
      })
      .nullable()
      .describe(
        'The FIFO lines of deliveries, summed (one line, or with an ordering key one per bucket of its values and one for ' +
          'events without a value); null for a webhook whose ordering is none (and whose lines are empty).',
      ),
    max_concurrency: z
      .number()
      .int()
      .nullable()
      .describe('The webhook’s ceiling of attempts in flight per worker; null: the worker’s send slots.'),
    concurrency: z
      .object({
        limit: z
          .number()
          .int()
          .nullable()
          .describe(
            'The endpoint’s adaptive concurrency limits, summed over the workers that sent to it in the last minute; null: none did.',
          ),
        in_flight: z
          .number()
          .int()
          .describe(
            'Attempts in flight to the endpoint, summed over those workers (as of their last report, at most a second old).',
          ),
        workers: z
          .number()
          .int()
          .describe('Workers that sent to the endpoint in the last minute, each with a limit of its own.'),
        paused_until: z
          .string()
          .nullable()
          .describe('Until when (ISO 8601) the endpoint asked with Retry-After to get nothing; null: not paused.'),
      })
      .describe(
        'Flow control of the webhook’s endpoint (its URL origin, shared with this vendor’s other webhooks on it; other vendors on the origin have flow control of their own).',
      ),
    minutes: z
      .array(
        z.object({
          minute: z.string().describe('The minute’s start (ISO 8601).'),
          delivered: z.number().int(),
          failed: z.number().int(),
        }),
      )
      .describe('The last 60 minutes, oldest first, the current one last; minutes without attempts are zeros.'),
  })
  .meta({ id: 'EndpointStats' });

function toWindow(w: StatsWindow): z.infer<typeof windowSchema> {
  const ms = (value: number | undefined) => (value === undefined ? null : Math.round(value));
  return {
    attempts: w.attempts,
    delivered: w.delivered,
    failed: w.failed,
    success_rate: w.successRate === undefined ? null : Math.round(w.successRate * 10_000) / 10_000,
    p50_ms: ms(w.p50Ms),
    p95_ms: ms(w.p95Ms),
  };
}

export interface StatsRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  stats: EndpointStatsReader;
  circuits: Pick<RedisCircuitLog, 'of'>;
  lines: Pick<RedisFifoLines, 'summary'>;
  flow: Pick<RedisEndpointFlow, 'read'>;
  nowMs: () => number;
}

/** A webhook's delivery stats, `GET /vendors/v1/webhooks/{webhook_id}/stats`, scoped to the key's vendor (role vendor). */
export function statsRoutes(deps: StatsRouteDeps): FastifyPluginAsyncZod {
  return async (app) => {
    app.get(
      '/vendors/v1/webhooks/:webhook_id/stats',
      {
        onRequest: deps.authorize('vendor', { portal: 'read' }),
        schema: {
          tags: ['stats'],
          summary: 'Delivery stats of a webhook',
          description:
            'Success rate and response times over the last hour and day, attempts per minute over the last hour, the newest ' +
            'attempt, the endpoint’s circuit and flow control, the send rate beside the webhook’s rate limit, and the FIFO line of a ' +
            'webhook with ordering fifo. Counted from attempts sent; kept a day.',
          params: z.object({ webhook_id: z.string().describe('Webhook id (UUID).') }),
          querystring: noQueryParameters,
          response: { 200: statsSchema, ...errorResponses(400, 401, 403, 404) },
        },
      },
      async (request) => {
        const webhookId = checkedUuid(request.params.webhook_id, 'invalid_webhook_id');
        const webhook = await deps.webhooks.get(vendorOf(request), webhookId);
        if (!webhook) throw new ApiError('webhook_not_found');
        const nowMs = deps.nowMs();
        const [stats, [circuit], line, flow] = await Promise.all([
          deps.stats.read(webhook.id, nowMs),
          deps.circuits.of([webhook.id]),
          deps.lines.summary(webhook.id),
          deps.flow.read(endpointKey(webhook.vendorId, webhook.callbackUrl)),
        ]);
        const { last } = stats;
        return {
          webhook_id: webhook.id,
          circuit: circuit?.state ?? ('closed' as const),
          last_attempt:
            last === undefined
              ? null
              : {
                  attempted_at: new Date(last.atMs).toISOString(),
                  outcome: last.outcome,
                  status_code: last.statusCode ?? null,
                  duration_ms: last.durationMs,
                },
          windows: { hour: toWindow(stats.hour), day: toWindow(stats.day) },
          rate_limit_per_second: webhook.rateLimitPerSecond ?? null,
          send_rate_per_second: Math.round(stats.sendRatePerSecond * 1_000) / 1_000,
          ordering: webhook.ordering,
          // A line left from before a switch to none still goes out in order: shown until it is empty.
          fifo_line:
            webhook.ordering === 'none' && line.length === 0
              ? null
              : {
                  length: line.length,
                  oldest_waiting_ms:
                    line.headAcceptedAtMs === undefined ? null : Math.max(0, nowMs - line.headAcceptedAtMs),
                },
          max_concurrency: webhook.maxConcurrency ?? null,
          concurrency: {
            limit: flow.workers.length === 0 ? null : flow.workers.reduce((sum, w) => sum + w.limit, 0),
            in_flight: flow.workers.reduce((sum, w) => sum + w.inflight, 0),
            workers: flow.workers.length,
            paused_until: flow.pausedUntilMs === undefined ? null : new Date(flow.pausedUntilMs).toISOString(),
          },
          minutes: stats.minutes.map((m) => ({
            minute: new Date(m.atMs).toISOString(),
            delivered: m.delivered,
            failed: m.failed,
          })),
        };
      },
    );
  };
}
