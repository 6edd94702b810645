import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import {
  callbackTargetProblem,
  formatRetention,
  newWebhookSecret,
  parseRetentionMs,
  retryPolicyOf,
  retryPolicyProblem,
  toWebhookResource,
  webhookCreateSchema,
  webhookPatchSchema,
  webhookResourceSchema,
  type RetryPolicy,
  type WebhookResource,
} from '../../domain/webhook.js';
import {
  authFromInput,
  checkClientCertificate,
  type AuthInput,
  type ClientCertificate,
  type ReceiverAuth,
} from '../../domain/receiver-auth.js';
import type { WebhookRegistry } from '../../store/webhooks.js';
import { vendorOf, type Authorizer } from '../auth.js';
import { ApiError, checkedUuid } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

const idParams = z.object({ webhook_id: z.string().describe('Webhook id (UUID) as returned on registration.') });

const checkedId = (webhookId: string) => checkedUuid(webhookId, 'invalid_webhook_id');

function conflict(eventType: string, existingId?: string): ApiError {
  return existingId === undefined
    ? new ApiError('webhook_conflict', `A webhook for ${eventType} is already registered for this vendor`)
    : new ApiError(
        'webhook_conflict',
        `A webhook for ${eventType} is already registered for this vendor: ${existingId}`,
        { webhook_id: existingId },
      );
}

/** 409 for a callback URL moved to another origin while stored credentials would follow it unrestated, naming them. */
function credentialsNotRestated(unrestated: { headers: string[]; auth: boolean }): ApiError {
  const named = [
    ...(unrestated.headers.length === 0
      ? []
      : [`headers ${unrestated.headers.map((name) => `"${name}"`).join(', ')} (their values)`]),
    ...(unrestated.auth ? ['auth'] : []),
  ];
  return new ApiError(
    'credentials_not_restated',
    `callback_url moves to another origin (scheme, host or port), where the webhook’s stored credentials would go: ` +
      `${named.join(' and ')}. Reads never show them, so send them again in the same request, or null to drop them ` +
      '(a path or query change on the same origin keeps them; the client certificate stays)',
  );
}

/** A webhook as `request` may see it: a portal session below manage sees no secret, since whoever holds the secret can sign as the platform. */
function shownTo(request: FastifyRequest, webhook: WebhookResource): WebhookResource {
  if (request.principal?.portal === undefined || request.principal.portal.permission === 'manage') return webhook;
  const { secret: _secret, ...rest } = webhook;
  return rest;
}

export interface WebhookRouteDeps {
  authorize: Authorizer;
  webhooks: WebhookRegistry;
  /** false: callback URLs that point at loopback, private or reserved addresses are refused (400). */
  allowPrivateTargets: boolean;
  /** The installation's retention (HOOKLINE_RETENTION): a webhook's own may not be longer. */
  retentionMs: number;
  /** The installation's retry schedule (HOOKLINE_RETRY_SCHEDULE): a webhook's retry policy stays within it. */
  retryScheduleMs: readonly number[];
  nowMs: () => number;
}

/** Webhook CRUD under `/vendors/v1/webhooks`, scoped to the key's vendor (role vendor). */
export function webhookRoutes(deps: WebhookRouteDeps): FastifyPluginAsyncZod {
  /** 400 for a callback URL the SSRF guard would block at every delivery anyway. */
  const checkTarget = (callbackUrl: string | undefined) => {
    const problem =
      callbackUrl === undefined || deps.allowPrivateTargets ? undefined : callbackTargetProblem(callbackUrl);
    if (problem !== undefined) throw new ApiError('invalid_request', `Invalid request body: ${problem}`);
  };

  /** The receiver auth of a body, its token URL checked as a callback URL is. */
  const checkedAuth = (input: AuthInput | null): ReceiverAuth | null => {
    if (input === null) return null;
    if (input.type === 'oauth2_client_credentials' && !deps.allowPrivateTargets) {
      const problem = callbackTargetProblem(input.token_url)?.replace('callback_url', 'auth.token_url');
      if (problem !== undefined) throw new ApiError('invalid_request', `Invalid request body: ${problem}`);
    }
    return authFromInput(input);
  };
  /** The client certificate of a body, checked against its key and the clock. */
  const checkedCertificate = (input: { cert_pem: string; key_pem: string } | null): ClientCertificate | null => {
    if (input === null) return null;
    const checked = checkClientCertificate(input, deps.nowMs());
    if (!checked.ok) throw new ApiError('invalid_request', `Invalid request body: ${checked.problem}`);
    return checked.certificate;
  };
  const invalid = (problem: string) => new ApiError('invalid_request', `Invalid request body: ${problem}`);
  /** A webhook's retention (ms), within the installation's. */
  const checkedRetention = (text: string | null): number | null => {
    if (text === null) return null;
    const ms = parseRetentionMs(text)!;
    if (ms > deps.retentionMs)
      throw invalid(`retention must be at most the installation's retention, ${formatRetention(deps.retentionMs)}`);
    return ms;
  };
  /** A webhook's retry policy (ms), within the installation's schedule. */
  const checkedRetry = (input: { schedule?: string[]; max_age?: string } | null): RetryPolicy | null => {
    if (input === null) return null;
    const policy = retryPolicyOf(input);
    const problem = retryPolicyProblem(policy, deps.retryScheduleMs);
    if (problem !== undefined) throw invalid(problem);
    return policy;
  };

  return async (app) => {
    // Portal sessions: listing needs read; every change needs manage.
    const onRequest = deps.authorize('vendor', { portal: 'manage' });
    const onRead = deps.authorize('vendor', { portal: 'read' });

    app.post(
      '/vendors/v1/webhooks',
      {
        onRequest,
        schema: {
          tags: ['webhooks'],
          summary: 'Register a webhook',
          description:
            'One webhook per event_type and vendor: a second registration answers 409. Without a secret, a webhook that signs ' +
            'with hmac (the default) gets a generated whsec_ secret, answered here once (and listed like any secret). ' +
            'Unless the engine allows private ' +
            'targets, a callback_url whose host is localhost (or under .localhost) or an IP address in a loopback, private, ' +
            'link-local or otherwise reserved range answers 400; names are checked where they resolve, at delivery.',
          querystring: noQueryParameters,
          body: webhookCreateSchema,
          response: {
            201: z.object({
              webhook_id: z.string(),
              secret: z
                .string()
                .optional()
                .describe('Present only when Hookline generated the secret: store it with the receiver.'),
            }),
            ...errorResponses(400, 401, 403, 409, 413, 415, 500),
          },
        },
      },
      async (request, reply) => {
        const body = request.body;
        checkTarget(body.callback_url);
        const result = await deps.webhooks.create(vendorOf(request), {
          eventType: body.event_type,
          callbackUrl: body.callback_url,
          ...(body.secret === undefined ? {} : { secret: body.secret }),
          ...(body.rate_limit_per_second === undefined ? {} : { rateLimitPerSecond: body.rate_limit_per_second }),
          ...(body.signature === undefined ? {} : { signature: body.signature }),
          ...(body.filter === undefined ? {} : { filter: body.filter }),
          ...(body.ordering === undefined ? {} : { ordering: body.ordering }),
          ...(body.ordering_key === undefined ? {} : { orderingKey: body.ordering_key }),
          ...(body.max_concurrency === undefined ? {} : { maxConcurrency: body.max_concurrency }),
          ...(body.retention === undefined ? {} : { retentionMs: checkedRetention(body.retention)! }),
          ...(body.retry === undefined ? {} : { retry: checkedRetry(body.retry)! }),
          ...(body.include_fields === undefined ? {} : { includeFields: body.include_fields }),
          ...(body.priority === undefined ? {} : { priority: body.priority }),
          ...(body.propagate_trace === undefined ? {} : { propagateTrace: body.propagate_trace }),
          ...(body.headers === undefined ? {} : { headers: body.headers }),
          ...(body.auth === undefined ? {} : { auth: checkedAuth(body.auth) as ReceiverAuth }),
          ...(body.tls_client_certificate === undefined
            ? {}
            : { clientCertificate: checkedCertificate(body.tls_client_certificate) as ClientCertificate }),
        });
        if (!result.ok)
          throw result.reason === 'invalid' ? invalid(result.problem) : conflict(body.event_type, result.existingId);
        const generated = body.secret === undefined ? result.webhook.secret : undefined;
        return reply
          .code(201)
          .send({ webhook_id: result.webhook.id, ...(generated === undefined ? {} : { secret: generated }) });
      },
    );

    app.get(
      '/vendors/v1/webhooks',
      {
        onRequest: onRead,
        schema: {
          tags: ['webhooks'],
          summary: 'List the vendor’s webhooks',
          description:
            'Every webhook of the key’s vendor, with its secret when it has one and whether deliveries to it are enabled. ' +
            'A vendor portal session sees secrets only with the manage permission.',
          querystring: noQueryParameters,
          response: { 200: z.object({ webhooks: z.array(webhookResourceSchema) }), ...errorResponses(401, 403, 500) },
        },
      },
      async (request) => {
        const webhooks = (await deps.webhooks.list(vendorOf(request))).map((webhook) =>
          toWebhookResource(webhook, deps.nowMs()),
        );
        return { webhooks: webhooks.map((webhook) => shownTo(request, webhook)) };
      },
    );

    app.get(
      '/vendors/v1/webhooks/:webhook_id',
      {
        onRequest: onRead,
        schema: {
          tags: ['webhooks'],
          summary: 'Get one of the vendor’s webhooks',
          description:
            'The webhook as the list shows it: with its secret when it has one, and whether deliveries to it are enabled. ' +
            'Another vendor’s webhook answers 404. A vendor portal session sees the secret only with the manage permission.',
          params: idParams,
          querystring: noQueryParameters,
          response: { 200: webhookResourceSchema, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request) => {
        const webhook = await deps.webhooks.get(vendorOf(request), checkedId(request.params.webhook_id));
        if (!webhook) throw new ApiError('webhook_not_found');
        return shownTo(request, toWebhookResource(webhook, deps.nowMs()));
      },
    );

    app.patch(
      '/vendors/v1/webhooks/:webhook_id',
      {
        onRequest,
        schema: {
          tags: ['webhooks'],
          summary: 'Update a webhook',
          description:
            'Any of event_type, callback_url, secret (null removes it), enabled, rate_limit_per_second (null removes the limit), ' +
            'max_concurrency (null removes the ceiling), ordering, ordering_key (null removes it), signature, filter (null removes ' +
            'it), with the rules of ' +
            'registration. Answers the whole webhook. ' +
            'A new secret starts a rotation (see secret and previous_secret_expires_at). A webhook that signs with hmac keeps a ' +
            'secret: secret null on it answers 400. A callback_url on another origin (scheme, host or port) while the webhook ' +
            'has custom headers or auth answers 409 credentials_not_restated unless the same request gives them again (every ' +
            'header’s value, a new auth) or drops them (null): their values are never shown, and would otherwise go to the new ' +
            'host unseen. A new path or query on the same origin keeps them; so does the client certificate, whose key is ' +
            'never sent.',
          params: idParams,
          querystring: noQueryParameters,
          body: webhookPatchSchema,
          response: { 200: webhookResourceSchema, ...errorResponses(400, 401, 403, 404, 409, 413, 415, 500) },
        },
      },
      async (request) => {
        const webhookId = checkedId(request.params.webhook_id);
        const body = request.body;
        checkTarget(body.callback_url);
        const result = await deps.webhooks.update(vendorOf(request), webhookId, {
          ...(body.event_type === undefined ? {} : { eventType: body.event_type }),
          ...(body.callback_url === undefined ? {} : { callbackUrl: body.callback_url }),
          ...(body.secret === undefined ? {} : { secret: body.secret }),
          ...(body.enabled === undefined ? {} : { enabled: body.enabled }),
          ...(body.rate_limit_per_second === undefined ? {} : { rateLimitPerSecond: body.rate_limit_per_second }),
          ...(body.signature === undefined ? {} : { signature: body.signature }),
          ...(body.filter === undefined ? {} : { filter: body.filter }),
          ...(body.ordering === undefined ? {} : { ordering: body.ordering }),
          ...(body.ordering_key === undefined ? {} : { orderingKey: body.ordering_key }),
          ...(body.max_concurrency === undefined ? {} : { maxConcurrency: body.max_concurrency }),
          ...(body.retention === undefined ? {} : { retentionMs: checkedRetention(body.retention) }),
          ...(body.retry === undefined ? {} : { retry: checkedRetry(body.retry) }),
          ...(body.include_fields === undefined ? {} : { includeFields: body.include_fields }),
          ...(body.priority === undefined ? {} : { priority: body.priority }),
          ...(body.propagate_trace === undefined ? {} : { propagateTrace: body.propagate_trace }),
          ...(body.headers === undefined ? {} : { headers: body.headers }),
          ...(body.auth === undefined ? {} : { auth: checkedAuth(body.auth) }),
          ...(body.tls_client_certificate === undefined
            ? {}
            : { clientCertificate: checkedCertificate(body.tls_client_certificate) }),
        });
        if (result.ok) return toWebhookResource(result.webhook, deps.nowMs());
        if (result.reason === 'invalid') throw invalid(result.problem);
        if (result.reason === 'conflict') throw conflict(body.event_type ?? 'this event_type');
        if (result.reason === 'credentials_not_restated') throw credentialsNotRestated(result);
        if (result.reason === 'unsigned')
          throw new ApiError(
            'invalid_request',
            'Invalid request body: secret null would leave an hmac-signed webhook unsigned; rotate the secret instead, or set signature ed25519 in the same request',
          );
        throw new ApiError('webhook_not_found');
      },
    );

    app.post(
      '/vendors/v1/webhooks/:webhook_id/rotate-secret',
      {
        onRequest,
        schema: {
          tags: ['webhooks'],
          summary: 'Rotate the secret to one Hookline generates',
          description:
            'Generates a Standard Webhooks secret (whsec_ and 32 random bytes in base64) and starts a rotation as a PATCH with a new ' +
            'secret does: the previous secret keeps signing until previous_secret_expires_at. The answer is the only one that carries ' +
            'the secret beside the webhook list; store it before the overlap ends. A webhook without a secret gets its first one.',
          params: idParams,
          querystring: noQueryParameters,
          response: {
            200: z.object({
              webhook_id: z.string(),
              secret: z.string().describe('The new secret.'),
              previous_secret_expires_at: z
                .string()
                .nullable()
                .describe('When the previous secret stops signing; null when there was none.'),
            }),
            ...errorResponses(400, 401, 403, 404, 500),
          },
        },
      },
      async (request) => {
        const webhookId = checkedId(request.params.webhook_id);
        const secret = newWebhookSecret();
        const result = await deps.webhooks.update(vendorOf(request), webhookId, { secret });
        if (!result.ok) throw new ApiError('webhook_not_found');
        const untilMs = result.webhook.previousSecret?.untilMs;
        return {
          webhook_id: webhookId,
          secret,
          previous_secret_expires_at: untilMs === undefined ? null : new Date(untilMs).toISOString(),
        };
      },
    );

    app.delete(
      '/vendors/v1/webhooks/:webhook_id',
      {
        onRequest,
        schema: {
          tags: ['webhooks'],
          summary: 'Delete a webhook',
          description: 'Its pending deliveries are dropped (counted in metrics), not retried.',
          params: idParams,
          querystring: noQueryParameters,
          response: { 204: z.null().describe('Deleted.'), ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request, reply) => {
        const webhookId = checkedId(request.params.webhook_id);
        if (!(await deps.webhooks.delete(vendorOf(request), webhookId))) throw new ApiError('webhook_not_found');
        return reply.code(204).send(null);
      },
    );
  };
}
