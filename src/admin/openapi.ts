import type { FastifyDynamicSwaggerOptions, SwaggerTransform, SwaggerTransformObject } from '@fastify/swagger';
import type { FastifySchema } from 'fastify';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { deliveryHeadersSchema, RECEIVER_ANSWERS } from '../delivery/callback-contract.js';
import { envelopeSchema } from '../domain/event.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../domain/events.js';
import { VERSION } from '../version.js';
import { authorizationOf, PORTAL_COOKIE, type Authorization } from './auth.js';
import { ERRORS, errorBody, type ErrorCode } from './errors.js';
import { errorSchema } from './schemas.js';

/**
 * The OpenAPI document's one source of what route schemas do not say: each operation's id and
 * answers, the errors every route of a kind can answer, and the outgoing callback (`webhooks`).
 * The swagger `transform` applies it to every documented route, so a new route gets the same
 * treatment; a route missing from OPERATIONS has no operationId, which the OpenAPI test refuses.
 */

/** An error an operation answers, with what makes it answer so when the catalogue's message is not enough. */
interface ErrorDoc {
  code: ErrorCode;
  /** When it happens (default: the catalogue's message). */
  when?: string;
  /** The example's message (default: the catalogue's). */
  message?: string;
  /** The example's fields beside `error` and `code`. */
  details?: { webhook_id: string };
}

interface OperationDoc {
  /** camelCase and stable: generated clients name their methods after it. */
  operationId: string;
  /** What the success answer means. */
  success: string;
  /**
   * What the handler itself answers. Authentication, the role check, the request limit, input
   * validation, storage outages and unexpected errors are added by the route's kind (see errorsOf).
   */
  errors?: readonly (ErrorCode | ErrorDoc)[];
  /** Other answers the route declares with its own schema, by status. */
  others?: Readonly<Record<number, string>>;
}

const webhookLookup: readonly ErrorCode[] = ['invalid_webhook_id', 'webhook_not_found'];
const deliveryLookup: readonly ErrorCode[] = [...webhookLookup, 'invalid_delivery_id', 'delivery_not_found'];

/** The per-address limit: every route that authenticates answers it, and so does opening a portal session. */
const ADDRESS_LIMIT_DOC: ErrorDoc = {
  code: 'rate_limited',
  when:
    'More requests per second from this client address that authenticate nothing (no key, a bad key or cookie, a link being opened) ' +
    'than HOOKLINE_UNAUTHENTICATED_RATE_LIMIT_PER_SECOND allows.',
  message: 'More than 10 requests per second from this address authenticated nothing; retry after 1 s',
};

/** A range replay refused for the vendor's cap on replays it holds. */
const REPLAY_QUEUE_FULL_DOC = {
  code: 'replay_queue_full',
  when:
    'The vendor holds HOOKLINE_REPLAY_QUEUED_MAX range replays, waiting or running (10 by default): one more is accepted ' +
    'once one ends or is cancelled. Retry-After says 10 s.',
  message:
    'This vendor has 10 range replays waiting or running; one more would pass its cap (HOOKLINE_REPLAY_QUEUED_MAX). ' +
    'Wait for one to end, or cancel one (POST /vendors/v1/tasks/{task_id}/cancel)',
} as const satisfies ErrorDoc;

/** The webhook a registration conflict names in the examples. */
const EXISTING_WEBHOOK_ID = '3f2c1a9e-8b7d-4c6e-9f1a-2b3c4d5e6f70';

/** Every documented operation, by `METHOD /path/{param}`. */
const OPERATIONS: Readonly<Record<string, OperationDoc>> = {
  'GET /healthz': { operationId: 'getLiveness', success: 'The process is alive.' },
  'GET /readyz': {
    operationId: 'getReadiness',
    success: 'Ready: Redis answers.',
    others: { 503: 'Not ready: Redis does not answer. Take the instance out of rotation until it answers 200 again.' },
  },
  'POST /vendors/v1/webhooks': {
    operationId: 'createWebhook',
    success:
      'Registered; the new webhook’s id, and the secret Hookline generated when an hmac webhook was registered without one (answered this once).',
    errors: [
      {
        code: 'webhook_conflict',
        when: 'The vendor already has a webhook for this event_type; webhook_id names it.',
        message: `A webhook for EVENT_TYPE_MACHINE_CREATED is already registered for this vendor: ${EXISTING_WEBHOOK_ID}`,
        details: { webhook_id: EXISTING_WEBHOOK_ID },
      },
    ],
  },
  'GET /vendors/v1/webhooks': { operationId: 'listWebhooks', success: 'The vendor’s webhooks.' },
  'GET /vendors/v1/webhooks/{webhook_id}': {
    operationId: 'getWebhook',
    success: 'The webhook.',
    errors: webhookLookup,
  },
  'PATCH /vendors/v1/webhooks/{webhook_id}': {
    operationId: 'updateWebhook',
    success: 'Updated; the whole webhook.',
    errors: [
      ...webhookLookup,
      {
        code: 'webhook_conflict',
        when: 'The vendor already has another webhook for the new event_type.',
        message: 'A webhook for EVENT_TYPE_MACHINE_CREATED is already registered for this vendor',
      },
      {
        code: 'credentials_not_restated',
        when: 'callback_url moves to another origin while custom headers or auth would follow it unrestated.',
      },
    ],
  },
  'DELETE /vendors/v1/webhooks/{webhook_id}': {
    operationId: 'deleteWebhook',
    success: 'Deleted; its pending deliveries are dropped.',
    errors: webhookLookup,
  },
  'POST /internal/v1/events': {
    operationId: 'ingestEvents',
    success: 'Taken: a result per event, in request order. The accepted events are durable and their deliveries exist.',
    errors: [
      {
        code: 'rate_limited',
        when: 'The request’s events would take the API key past its ingest limit (HOOKLINE_INGEST_RATE_LIMIT_PER_SECOND events per second); none of them was ingested.',
        message: 'Ingest rate limit of 10000 events per second for this API key exceeded; retry after 1 s',
      },
    ],
  },
  'GET /vendors/v1/webhooks/{webhook_id}/deliveries': {
    operationId: 'listDeliveries',
    success: 'The webhook’s recent deliveries, newest first.',
    errors: webhookLookup,
  },
  'GET /vendors/v1/webhooks/{webhook_id}/deliveries/{delivery_id}': {
    operationId: 'getDelivery',
    success: 'The delivery and every attempt made, each with the headers of its request (signatures masked).',
    errors: deliveryLookup,
  },
  'GET /vendors/v1/webhooks/{webhook_id}/dead-letters': {
    operationId: 'listDeadLetters',
    success: 'The webhook’s dead letters, newest first.',
    errors: webhookLookup,
  },
  'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay': {
    operationId: 'replayDeadLetter',
    success: 'Queued: the new delivery of the same event.',
    errors: [...deliveryLookup, 'not_dead_letter'],
  },
  'POST /vendors/v1/webhooks/{webhook_id}/dead-letters/replay': {
    operationId: 'replayAllDeadLetters',
    success: 'Started: the task that replays them.',
    errors: webhookLookup,
  },
  'GET /vendors/v1/webhooks/{webhook_id}/events': {
    operationId: 'listWebhookEvents',
    success: 'A page of the webhook’s events, oldest first, with the cursor to continue from.',
    errors: [
      ...webhookLookup,
      { code: 'invalid_request', when: 'after is not a cursor this API answered, or limit is out of range.' },
      'event_log_disabled',
    ],
  },
  'POST /vendors/v1/webhooks/{webhook_id}/replay': {
    operationId: 'replayEventRange',
    success: 'Started: the task that replays the range, and how many events it held (capped: at least that many).',
    errors: [
      ...webhookLookup,
      { code: 'invalid_request', when: 'A field is missing or wrong, or since is after until.' },
      'event_log_disabled',
      {
        code: 'replay_count_limited',
        when:
          'The vendor’s range counts read more events this second than HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND allows ' +
          '(a count takes the webhook’s log size, or HOOKLINE_REPLAY_COUNT_MAX when smaller, before reading).',
      },
      REPLAY_QUEUE_FULL_DOC,
    ],
    others: { 200: 'A dry run: how many events a replay would send (capped: at least that many).' },
  },
  'GET /vendors/v1/webhooks/{webhook_id}/stats': {
    operationId: 'getWebhookStats',
    success: 'The webhook’s stats over the last hour and day, its newest attempt and its circuit.',
    errors: webhookLookup,
  },
  'POST /vendors/v1/webhooks/{webhook_id}/test': {
    operationId: 'sendTestEvent',
    success: 'Queued: the test delivery and its event.',
    errors: webhookLookup,
  },
  'POST /vendors/v1/webhooks/{webhook_id}/rotate-secret': {
    operationId: 'rotateWebhookSecret',
    success: 'Rotated: the generated secret (shown here once) and when the previous one stops signing.',
    errors: webhookLookup,
  },
  'POST /vendors/v1/webhooks/{webhook_id}/filter-test': {
    operationId: 'testWebhookFilter',
    success: 'Whether the filter matched the event, and why, node by node.',
    errors: webhookLookup,
  },
  'GET /vendors/v1/webhooks/{webhook_id}/public-keys': {
    operationId: 'getWebhookPublicKeys',
    success: 'The webhook’s signing keys’ public halves (none for an hmac webhook).',
    errors: webhookLookup,
  },
  'POST /vendors/v1/webhooks/{webhook_id}/rotate-signing-key': {
    operationId: 'rotateWebhookSigningKey',
    success: 'Rotated: the new key and the replaced one, with when it stops signing.',
    errors: [...webhookLookup, 'webhook_not_ed25519'],
  },
  'GET /.well-known/jwks.json': {
    operationId: 'getKeySet',
    success:
      'The key set: every Ed25519 public key that signs deliveries now or will after a rotation, or one webhook’s.',
    errors: ['invalid_webhook_id'],
    others: { 304: 'Not modified: the key set is the one the If-None-Match ETag names.' },
  },
  'POST /vendors/v1/tasks/{task_id}/cancel': {
    operationId: 'cancelReplay',
    success: 'Cancelling: the task as it stands; it ends once the replays already queued have outcomes.',
    errors: [
      'invalid_task_id',
      { code: 'task_not_found', when: 'No such task, another vendor’s task, or a task that is no bulk replay.' },
      'task_finished',
    ],
  },
  'POST /admin/v1/tasks/{task_id}/cancel': {
    operationId: 'cancelAnyReplay',
    success: 'Cancelling: the task as it stands; it ends once the replays already queued have outcomes.',
    errors: [
      'invalid_task_id',
      { code: 'task_not_found', when: 'No such task, or a task that is no bulk replay.' },
      'task_finished',
    ],
  },
  'GET /rental/v1/tasks/{task_id}': {
    operationId: 'getTask',
    success: 'The task.',
    errors: [
      'invalid_task_id',
      { code: 'task_not_found', when: 'No such task, or (to a vendor key) a task another vendor started.' },
    ],
  },
  'GET /admin/v1/webhooks': {
    operationId: 'listAllWebhooks',
    success: 'Every matching webhook with its state, most urgent first.',
  },
  'GET /admin/v1/webhooks/{webhook_id}': {
    operationId: 'getWebhookStatus',
    success: 'The webhook with its state.',
    errors: webhookLookup,
  },
  'GET /admin/v1/dead-letters': {
    operationId: 'listAllDeadLetters',
    success: 'Dead letters across webhooks, newest first.',
    errors: webhookLookup,
  },
  'POST /admin/v1/webhooks/{webhook_id}/enable': {
    operationId: 'enableWebhook',
    success: 'Enabled; the webhook with its state. Deliveries held while it was paused go out at once.',
    errors: webhookLookup,
  },
  'POST /admin/v1/webhooks/{webhook_id}/dead-letters/replay': {
    operationId: 'replayAllDeadLettersOfAnyWebhook',
    success: 'Queued as a task; poll it until it ends.',
    errors: webhookLookup,
  },
  'POST /admin/v1/webhooks/{webhook_id}/dead-letters/{delivery_id}/replay': {
    operationId: 'replayDeadLetterOfAnyWebhook',
    success: 'Queued: the replay’s delivery id.',
    errors: [...deliveryLookup, 'not_dead_letter'],
  },
  'POST /admin/v1/replays': {
    operationId: 'replayEventRangeOfAnyVendor',
    success: 'Started: a task per webhook with events in the range.',
    errors: [
      'invalid_webhook_id',
      { code: 'webhook_not_found', when: 'The vendor has no webhook of that id.' },
      { code: 'invalid_request', when: 'A field is missing or wrong, or since is after until.' },
      'event_log_disabled',
      {
        ...REPLAY_QUEUE_FULL_DOC,
        when: `${REPLAY_QUEUE_FULL_DOC.when} An operator’s replays count toward the vendor they target, all or none.`,
      },
    ],
    others: { 200: 'A dry run: how many events a replay would send, per webhook (capped: at least that many).' },
  },
  'DELETE /admin/v1/events/{event_id}': {
    operationId: 'eraseEvent',
    success: 'Started: the erasure task.',
    errors: [{ code: 'invalid_request', when: 'event_id is not a UUID.' }],
  },
  'DELETE /admin/v1/vendors/{vendor_id}/data': {
    operationId: 'eraseVendorData',
    success: 'Started: the erasure task.',
    errors: [{ code: 'invalid_request', when: 'vendor_id is not a vendor id.' }],
  },
  'GET /rental/v1/machines/agents/{deployment_id}': {
    operationId: 'getAgentStatus',
    success: 'The agent status of the deployment.',
    errors: ['invalid_deployment_id', 'deployment_not_found'],
  },
  'GET /rental/v1/machines': {
    operationId: 'listMachines',
    success: 'One page of matching machines.',
    errors: ['invalid_filter', 'machine_not_found'],
  },
  'POST /admin/v1/portal/sessions': {
    operationId: 'issuePortalLink',
    success: 'Issued: the session and its one-time link.',
    errors: [
      {
        code: 'public_url_required',
        when:
          'HOOKLINE_PUBLIC_URL is unset and the API listens on an address other than loopback, or it is plain http on a host ' +
          'other than loopback, where browsers would drop the Secure session cookie.',
      },
    ],
  },
  'GET /admin/v1/portal/sessions': {
    operationId: 'listPortalSessions',
    success: 'The vendor’s live sessions, newest first.',
  },
  'DELETE /admin/v1/portal/sessions/{session_id}': {
    operationId: 'revokePortalSession',
    success: 'Revoked.',
    errors: ['invalid_session_id', 'portal_session_not_found'],
  },
  'DELETE /admin/v1/portal/sessions': {
    operationId: 'revokeVendorPortalSessions',
    success: 'Every session of the vendor revoked; how many were live.',
  },
  'POST /portal/v1/session': {
    operationId: 'openPortalSession',
    success: 'Opened: the session cookie is set; the CSRF token to echo.',
    errors: [
      { code: 'portal_token_invalid', when: 'The token is malformed, was already used, has expired or was revoked.' },
      { code: 'csrf_failed', when: 'The browser says the request came from another site (Sec-Fetch-Site).' },
      ADDRESS_LIMIT_DOC,
      { code: 'storage_unavailable', when: 'Redis is unreachable.' },
      'internal',
    ],
  },
  'GET /portal/v1/session': { operationId: 'getPortalSession', success: 'The session and its CSRF token.' },
  'DELETE /portal/v1/session': {
    operationId: 'closePortalSession',
    success: 'Signed out: the session is revoked and its cookie cleared.',
  },
  'GET /portal/v1/catalogue': {
    operationId: 'getEventCatalogue',
    success: 'The six event types, each with its JSON Schema and a sample body.',
  },
};

/** What each status means, before the codes that answer it. */
const STATUS_TEXT: Readonly<Record<number, string>> = {
  400: 'Invalid request',
  401: 'Not authenticated',
  403: 'Not permitted',
  404: 'Not found',
  409: 'Conflict',
  413: 'Body too large',
  415: 'Unsupported media type',
  429: 'Rate limited',
  500: 'Internal error',
  503: 'Storage unavailable',
};

/** The answers that carry `Retry-After: 1`. */
const RETRY_AFTER_STATUSES = new Set([429, 503]);

const CSRF_DOC: ErrorDoc = {
  code: 'csrf_failed',
  when: 'A request made with the portal’s session cookie lacks the session’s X-CSRF-Token header, or comes from another site.',
};

/** The errors a route answers by its kind, then its handler's own; each code once. */
function errorsOf(
  schema: FastifySchema,
  authorization: Authorization | undefined,
  own: OperationDoc['errors'] = [],
): ErrorDoc[] {
  const docs: ErrorDoc[] = [];
  if (authorization?.sessionOnly) {
    docs.push({ code: 'unauthorized', when: 'No portal session cookie, or its session has expired or was revoked.' });
    docs.push(
      authorization.sessionOnly.csrf
        ? CSRF_DOC
        : { code: 'csrf_failed', when: 'The browser says the request comes from another origin (Sec-Fetch-Site).' },
    );
  } else if (authorization) {
    docs.push({ code: 'unauthorized', when: 'The X-API-Key header is missing, or names no valid key.' });
    const roleMessage = `This API key does not have the ${authorization.roles.join(' or ')} role`;
    docs.push({ code: 'forbidden', when: `${roleMessage}.`, message: roleMessage });
    if (authorization.roles.length === 1 && authorization.roles[0] === 'vendor')
      docs.push({ code: 'no_vendor', when: 'The API key is not bound to a vendor.' });
    if (authorization.portal) {
      docs.push(CSRF_DOC, {
        code: 'portal_permission',
        when: `A portal session without the ${authorization.portal} permission.`,
        message: `This portal session has the read permission; this needs ${authorization.portal}`,
      });
    }
    if (authorization.requestLimited) {
      docs.push({
        code: 'rate_limited',
        when: 'More requests per second with this API key than HOOKLINE_RATE_LIMIT_PER_SECOND allows.',
        message: 'Rate limit of 100 requests per second for this API key exceeded; retry after 1 s',
      });
    }
  }
  if (schema.querystring || schema.params || schema.body) {
    docs.push({ code: 'invalid_request', when: 'A parameter or the body is invalid; the message names it.' });
  }
  if (schema.body) {
    docs.push(
      { code: 'invalid_json', when: 'The body is not JSON, or not UTF-8.' },
      { code: 'body_too_large' },
      { code: 'unsupported_media_type' },
    );
  }
  docs.push(...own.map((doc) => (typeof doc === 'string' ? { code: doc } : doc)));
  if (authorization) {
    docs.push(ADDRESS_LIMIT_DOC);
    // Every authenticated request reads the key from storage, whatever the route does next.
    docs.push({
      code: 'storage_unavailable',
      when: 'Redis is unreachable, or refuses writes (out of memory, failing over).',
    });
    docs.push({ code: 'internal', when: 'An unexpected error; it is logged with full context.' });
  }
  // A code answered for several reasons is listed once, with every reason.
  const byCode = new Map<ErrorCode, ErrorDoc>();
  for (const doc of docs) {
    const first = byCode.get(doc.code);
    byCode.set(
      doc.code,
      first === undefined || first.when === doc.when
        ? (first ?? doc)
        : { ...first, when: `${first.when} Or: ${doc.when}` },
    );
  }
  return [...byCode.values()];
}

/** One response object for the errors of one status: each code named, and an example of each. */
function errorResponse(status: number, docs: readonly ErrorDoc[]): Record<string, unknown> {
  const lines = docs.map((doc) => `- \`${doc.code}\`: ${doc.when ?? `${ERRORS[doc.code].message}.`}`);
  const retry = RETRY_AFTER_STATUSES.has(status) ? '\n\nRetry after the Retry-After header’s seconds.' : '';
  return {
    description: `${STATUS_TEXT[status] ?? `HTTP ${status}`}.\n\n${lines.join('\n')}${retry}`,
    ...(RETRY_AFTER_STATUSES.has(status)
      ? {
          headers: {
            'Retry-After': { type: 'integer', minimum: 1, description: 'Seconds to wait before trying again.' },
          },
        }
      : {}),
    content: {
      'application/json': {
        schema: { $ref: '#/components/schemas/Error' },
        examples: Object.fromEntries(
          docs.map((doc) => [
            doc.code,
            {
              summary: doc.message ?? ERRORS[doc.code].message,
              value: { ...errorBody(doc.code, doc.message), ...doc.details },
            },
          ]),
        ),
      },
    },
  };
}

/** `/a/:b` → `/a/{b}`, as OpenAPI writes paths. */
const openapiPath = (url: string) => url.replace(/:(\w+)/g, '{$1}');

/**
 * The per-route transform: zod schemas to JSON Schema (fastify-type-provider-zod), then the
 * operation's id, security and answers from OPERATIONS and the route's authorizer.
 */
const transform: SwaggerTransform = (document) => {
  const converted = jsonSchemaTransform(document);
  const schema = converted.schema as FastifySchema & { hide?: boolean; response?: Record<string, unknown> };
  if (schema.hide) return converted;
  const { route } = document;
  const method = [route.method].flat()[0] ?? 'GET';
  const doc = OPERATIONS[`${method} ${openapiPath(converted.url)}`];
  const authorization = authorizationOf(route.onRequest);

  const responses: Record<string, unknown> = {};
  const declared = (route.schema?.response ?? {}) as Record<string, unknown>;
  for (const [status, json] of Object.entries(schema.response ?? {}) as [string, Record<string, unknown>][]) {
    // Errors are documented from the codes below, whatever schema the route declares for them.
    if (declared[status] === errorSchema) continue;
    const description = doc?.others?.[Number(status)] ?? (Number(status) < 400 ? doc?.success : undefined);
    // A schema of type null documents an answer without a body (204).
    responses[status] =
      json.type === 'null'
        ? { ...json, description }
        : { description, content: { 'application/json': { schema: json } } };
  }
  const byStatus = new Map<number, ErrorDoc[]>();
  for (const error of errorsOf(route.schema ?? {}, authorization, doc?.errors)) {
    const status: number = ERRORS[error.code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), error]);
  }
  for (const [status, docs] of [...byStatus].sort(([a], [b]) => a - b)) responses[status] = errorResponse(status, docs);

  const { security: _declared, ...rest } = schema;
  return {
    url: converted.url,
    schema: {
      ...rest,
      ...(doc ? { operationId: doc.operationId } : {}),
      // Routes with an authorizer inherit the document's API key requirement (and take the portal's
      // session cookie when they say so); the portal's session routes take only the cookie; the others need none.
      ...(authorization?.sessionOnly
        ? { security: [{ portalSession: [] }] }
        : authorization?.portal
          ? { security: [{ apiKey: [] }, { portalSession: [] }] }
          : authorization
            ? {}
            : { security: [] }),
      response: responses,
    },
  };
};

type JsonObject = Record<string, unknown>;

/** `EVENT_TYPE_MACHINE_CREATED` → `machineCreated`. */
function eventName(eventType: WebhookEventType): string {
  return eventType
    .replace(/^EVENT_TYPE_/, '')
    .toLowerCase()
    .replace(/_([a-z])/g, (_match, letter: string) => letter.toUpperCase());
}

/**
 * The `webhooks` section: for each event type, the POST a callback URL receives (envelope and
 * headers, converted from the schemas the sender is tested against) and how its answer is read.
 */
function callbackWebhooks(openapiObject: JsonObject): JsonObject {
  return Object.fromEntries(
    WEBHOOK_EVENT_TYPES.map((eventType) => {
      const { schema } = jsonSchemaTransform({
        schema: { body: envelopeSchema(eventType), headers: deliveryHeadersSchema(eventType) },
        url: `/${eventType}`,
        route: { method: 'POST', url: `/${eventType}`, handler: () => undefined },
        openapiObject,
      });
      const body = schema.body as JsonObject;
      const headers = schema.headers as { properties: Record<string, JsonObject>; required?: string[] };
      const parameters = Object.entries(headers.properties).map(([name, { description, ...headerSchema }]) => ({
        name,
        in: 'header',
        required: headers.required?.includes(name) ?? false,
        description,
        schema: headerSchema,
      }));
      const responses = Object.fromEntries(
        RECEIVER_ANSWERS.map((answer) => [
          answer.status,
          {
            description: answer.description,
            ...(answer.honoursRetryAfter
              ? {
                  headers: {
                    'Retry-After': { description: 'Delta-seconds or an HTTP date.', schema: { type: 'string' } },
                  },
                }
              : {}),
          },
        ]),
      );
      const operation = {
        operationId: `${eventName(eventType)}Webhook`,
        summary: `${eventType} delivery`,
        description: `${String(body.description)} Sent as a POST to the webhook’s callback_url, signed, and retried until answered 2xx.`,
        tags: ['callbacks'],
        // The receiver checks the signature headers; it is not called with an API key.
        security: [],
        parameters,
        requestBody: { required: true, content: { 'application/json': { schema: body } } },
        responses,
      };
      return [eventType, { post: operation }];
    }),
  );
}

/** Every `#/components/schemas/…` name a part of the document refers to. */
function schemaRefs(value: unknown, found: Set<string>): void {
  if (Array.isArray(value)) {
    for (const item of value) schemaRefs(item, found);
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, child] of Object.entries(value)) {
      if (key === '$ref' && typeof child === 'string' && child.startsWith('#/components/schemas/'))
        found.add(child.slice('#/components/schemas/'.length));
      else schemaRefs(child, found);
    }
  }
}

/**
 * Drops the component schemas nothing refers to: every zod schema with an id is emitted as input
 * and output, and most routes use only one of them.
 */
function withoutUnusedSchemas(document: JsonObject): JsonObject {
  const components = (document.components ?? {}) as JsonObject;
  const schemas = (components.schemas ?? {}) as Record<string, unknown>;
  const used = new Set<string>();
  schemaRefs({ ...document, components: { ...components, schemas: {} } }, used);
  // Follow references between components until no new name turns up.
  for (let size = -1; size !== used.size;) {
    size = used.size;
    for (const name of [...used]) schemaRefs(schemas[name], used);
  }
  const kept = Object.fromEntries(Object.entries(schemas).filter(([name]) => used.has(name)));
  return { ...document, components: { ...components, schemas: kept } };
}

/** The whole document: components from the zod registry, the webhooks section, and no unused schema. */
const transformObject: SwaggerTransformObject = (document) => {
  const object = jsonSchemaTransformObject(document) as JsonObject;
  // The document is OpenAPI 3.1 (swaggerOptions), never Swagger 2's swaggerObject.
  const { openapiObject } = document as { openapiObject: JsonObject };
  return withoutUnusedSchemas({ ...object, webhooks: callbackWebhooks(openapiObject) });
};

/** The @fastify/swagger options of the admin API: the document's header, and the transforms above. */
export function swaggerOptions(): FastifyDynamicSwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Hookline admin API',
        version: VERSION,
        description:
          'Webhook registration for vendors, task and agent-status lookups and the machine listing of the rental platform. ' +
          'Every error answers `{ "error": "<message>", "code": "<stable code>" }`. The `webhooks` section documents the ' +
          'signed POST each webhook’s callback_url receives.',
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
        contact: { name: 'Hookline maintainers' },
      },
      servers: [{ url: '/', description: 'The engine serving this document' }],
      components: {
        securitySchemes: {
          apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
          portalSession: {
            type: 'apiKey',
            in: 'cookie',
            name: PORTAL_COOKIE,
            description:
              'The vendor portal’s session cookie (POST /portal/v1/session sets it). Requests made with it also carry the ' +
              'session’s X-CSRF-Token header, and may do what the session’s permission allows (read, replay or manage).',
          },
        },
      },
      security: [{ apiKey: [] }],
      tags: [
        { name: 'webhooks', description: 'A vendor’s webhooks (scoped to the key’s vendor)' },
        { name: 'deliveries', description: 'A webhook’s deliveries, attempts, dead letters, replays and test events' },
        {
          name: 'events feed',
          description: 'A webhook’s events in accept order, kept for the retention period, and replays of a time range',
        },
        {
          name: 'stats',
          description: 'A webhook’s delivery stats: success rate, response times, attempts per minute, circuit',
        },
        { name: 'rental', description: 'Tasks, agent status and the machine listing' },
        { name: 'ingest', description: 'Events from the platform’s producer services (role events:write)' },
        { name: 'operator', description: 'The operator’s views and actions across vendors (role admin)' },
        {
          name: 'portal',
          description:
            'The vendor portal: magic-link sessions (role portal:issue), the browser’s session, and the public event catalogue its pages read',
        },
        { name: 'health', description: 'Liveness and readiness' },
        {
          name: 'callbacks',
          description: 'What a webhook’s callback_url receives: one signed POST per event, and how its answer is read',
        },
      ],
    },
    transform,
    transformObject,
  };
}
