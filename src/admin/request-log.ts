import { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { urlForLog } from '../logger.js';

type Fields = Record<string, unknown>;

declare module 'fastify' {
  interface FastifyRequest {
    /** The response body of an audited route (webhook ids, ingest counts), kept for the request's log line. */
    loggedResponse: Record<string, unknown> | null;
    /** The stable error code the request was answered with, when it failed. */
    loggedErrorCode: string | null;
    /** Set once the request's line is written, so it is written once. */
    logWritten: boolean;
  }
}

/** A callback URL as it may be logged: origin and path, query values redacted (a token may ride in them). */
function callbackForLog(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined;
  try {
    const url = new URL(text);
    return `${url.origin}${urlForLog(`${url.pathname}${url.search}`)}`;
  } catch {
    return undefined;
  }
}

const field = (value: unknown, name: string): unknown =>
  value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[name] : undefined;
const lowered = (value: unknown) => (typeof value === 'string' ? value.toLowerCase() : undefined);

/** Which changes a PATCH made, named for the operator: enabling and pausing first, then a secret rotation. */
function webhookChangeEvent(body: unknown): string {
  const enabled = field(body, 'enabled');
  if (enabled === true) return 'webhook.enabled';
  if (enabled === false) return 'webhook.paused';
  return field(body, 'secret') !== undefined && Object.keys(body as object).length === 1
    ? 'webhook.secret_rotated'
    : 'webhook.updated';
}

type AuditRule = { status: number; fields: (request: FastifyRequest, response: unknown) => Fields };

/** A 202 on the webhook named in the path: `event`, with these log fields taken from the response body's fields. */
function onPathWebhook(event: string, fromResponse: Record<string, string>): AuditRule {
  return {
    status: 202,
    fields: (request, response) => ({
      event,
      webhookId: lowered(field(request.params, 'webhook_id')),
      ...Object.fromEntries(
        Object.entries(fromResponse).map(([name, responseField]) => [name, field(response, responseField)]),
      ),
    }),
  };
}

/**
 * The routes whose successful requests are audit events: what changed, on which webhook. Only named
 * fields of a body are read, so the line never holds a secret, only whether one was set
 * (`secretSet`, `secretRotated`).
 */
const AUDITED: Partial<Record<string, AuditRule>> = {
  'POST /vendors/v1/webhooks': {
    status: 201,
    fields: (request, response) => ({
      event: 'webhook.created',
      webhookId: field(response, 'webhook_id'),
      eventType: field(request.body, 'event_type'),
      callbackUrl: callbackForLog(field(request.body, 'callback_url')),
      secretSet: field(request.body, 'secret') !== undefined,
    }),
  },
  'PATCH /vendors/v1/webhooks/:webhook_id': {
    status: 200,
    fields: (request) => ({
      event: webhookChangeEvent(request.body),
      webhookId: lowered(field(request.params, 'webhook_id')),
      changed: Object.keys((request.body as object | null) ?? {}),
      secretRotated: field(request.body, 'secret') !== undefined,
      ...(field(request.body, 'callback_url') === undefined
        ? {}
        : { callbackUrl: callbackForLog(field(request.body, 'callback_url')) }),
    }),
  },
  'DELETE /vendors/v1/webhooks/:webhook_id': {
    status: 204,
    fields: (request) => ({ event: 'webhook.deleted', webhookId: lowered(field(request.params, 'webhook_id')) }),
  },
  'POST /vendors/v1/webhooks/:webhook_id/dead-letters/:delivery_id/replay': onPathWebhook('dead_letter.replayed', {
    deliveryId: 'delivery_id',
    replayOf: 'replay_of',
  }),
  'POST /vendors/v1/webhooks/:webhook_id/dead-letters/replay': onPathWebhook('dead_letters.replay_started', {
    taskId: 'task_id',
  }),
  'POST /vendors/v1/webhooks/:webhook_id/replay': onPathWebhook('events.replay_started', {
    taskId: 'task_id',
    count: 'count',
  }),
  'POST /vendors/v1/webhooks/:webhook_id/test': onPathWebhook('webhook.test_sent', {
    deliveryId: 'delivery_id',
    eventId: 'event_id',
  }),
  // Ingest over HTTP: the request's line is the batch's line (a stream batch writes its own).
  'POST /internal/v1/events': {
    status: 202,
    fields: (_request, response) => {
      const results = field(response, 'results');
      return {
        event: 'ingest.batch',
        source: 'http',
        events: Array.isArray(results) ? results.length : undefined,
        accepted: field(response, 'accepted'),
        duplicates: field(response, 'duplicates'),
        rejected: field(response, 'rejected'),
        deliveries: Array.isArray(results)
          ? results.reduce((sum: number, r) => sum + (Number(field(r, 'deliveries')) || 0), 0)
          : undefined,
      };
    },
  },
};

const auditKey = (request: FastifyRequest) => `${request.method} ${request.routeOptions.url ?? ''}`;

/** The request's one line: who (key id and name), what (route, status, audit fields), how long. */
function requestFields(request: FastifyRequest, reply: FastifyReply, status: number): Fields {
  const principal = request.principal;
  const audit = AUDITED[auditKey(request)];
  return {
    event: 'http.request',
    method: request.method,
    url: urlForLog(request.url),
    route: request.routeOptions.url,
    status,
    durationMs: Math.round(reply.elapsedTime * 10) / 10,
    ip: request.ip,
    ...(principal
      ? {
          keyId: principal.keyId,
          keyName: principal.name,
          ...(principal.vendorId === undefined ? {} : { vendorId: principal.vendorId }),
        }
      : {}),
    ...(request.loggedErrorCode === null ? {} : { code: request.loggedErrorCode }),
    ...(audit && audit.status === status ? audit.fields(request, request.loggedResponse) : {}),
  };
}

/** How a request was answered, for its line. */
interface Answer {
  status: number;
  level: 'info' | 'error';
  /** The error code of the answer, when the line is written before the body is (see logRequestNow). */
  code?: string;
  err?: Error | string;
}

/**
 * Writes the request's one line now. The error handler calls it for a 5xx, so that the failure is
 * logged even when the client is gone before the response finishes; a request's line is written once.
 */
export function logRequestNow(request: FastifyRequest, reply: FastifyReply, answer: Answer): void {
  if (request.logWritten) return;
  request.logWritten = true;
  if (answer.code !== undefined) request.loggedErrorCode = answer.code;
  const fields = requestFields(request, reply, answer.status);
  request.log[answer.level](answer.err === undefined ? fields : { ...fields, err: answer.err }, String(fields.event));
}

/**
 * Fastify's request logging, replaced: one line per request when it completes (Fastify writes one
 * when a request comes in and one when it completes, and more for errors). A route whose logLevel
 * is above info (health probes, /metrics) writes nothing unless something goes wrong.
 */
export class RequestLogController extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (error) logRequestNow(request, reply, { status: reply.statusCode, level: 'error', err: error });
    else logRequestNow(request, reply, { status: reply.statusCode, level: 'info' });
  }

  /** Fastify's own error handler (the health server has no other): the request's line, at error for a 5xx. */
  override defaultErrorLog(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    logRequestNow(request, reply, {
      status: reply.statusCode,
      level: reply.statusCode >= 500 ? 'error' : 'info',
      err: error,
    });
  }
}

/**
 * Keeps what a request's line needs from its response: the body of an audited route, and the
 * error code of a failure. Installed on the root instance, so it sees every route.
 */
export function keepResponseForLog(app: FastifyInstance): void {
  app.decorateRequest('loggedResponse', null);
  app.decorateRequest('loggedErrorCode', null);
  app.decorateRequest('logWritten', false);
  app.addHook('preSerialization', async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    if (reply.statusCode >= 400) {
      const code = field(payload, 'code');
      if (typeof code === 'string') request.loggedErrorCode = code;
    } else if (AUDITED[auditKey(request)] !== undefined) {
      request.loggedResponse = payload as Record<string, unknown>;
    }
    return payload;
  });
}
