import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from './events.js';
import { blockedAddressReason, parseIpLiteralHost } from './ip-policy.js';
import { parseFilter, type FilterNode } from './filter.js';
import { describeDurationMs, formatDurationMs } from '../lib/duration.js';
import { MAX_CONCURRENCY_MAX } from './concurrency-limit.js';
import { IDENTIFIER_PATHS, INCLUDE_FIELDS_MAX, includeFieldProblem } from './field-selection.js';
import { ORDERING_KEY_BUCKETS, orderingKeyProblem } from './ordering-key.js';
import { RATE_LIMIT_PER_SECOND_MAX } from './rate-limit.js';
import { SIGNATURE_SCHEMES, signingKeysAt, type SignatureScheme, type SigningKey } from './signing-keys.js';
import {
  authInputSchema,
  authViewSchema,
  clientCertificateInputSchema,
  clientCertificateViewSchema,
  headersInputSchema,
  headersPatchSchema,
  maskedHeaders,
  toAuthView,
  toClientCertificateView,
  type ClientCertificate,
  type ReceiverAuth,
} from './receiver-auth.js';

const CALLBACK_URL_MAX_CHARS = 2048;
export const DISABLED_REASONS = ['gone', 'failing', 'paused'] as const;
export type DisabledReason = (typeof DISABLED_REASONS)[number];
const SECRET_MAX_CHARS = 512;

const requiredString = (field: string) =>
  z.string({ error: (issue) => (issue.input === undefined ? `${field} is required` : `${field} must be a string`) });

/** Why `text` is not an acceptable callback URL, or undefined when it is. */
export function callbackUrlProblem(text: string): string | undefined {
  if (text.length === 0) return 'callback_url must not be empty';
  if (text.length > CALLBACK_URL_MAX_CHARS) return `callback_url must be at most ${CALLBACK_URL_MAX_CHARS} characters`;
  if (text.trim() !== text || /\s/.test(text)) return 'callback_url must not contain whitespace';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'callback_url must be a valid absolute URL';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'callback_url must use http or https';
  if (url.hostname === '') return 'callback_url must name a host';
  // Credentials in a URL end up in logs and proxies; a secret header or the signature is the way.
  if (url.username !== '' || url.password !== '') return 'callback_url must not contain credentials';
  if (url.hash !== '') return 'callback_url must not contain a fragment';
  return undefined;
}

/**
 * With the SSRF guard on: why the valid callback URL `text` must be refused at registration, or
 * undefined. Refuses IP-literal hosts in a blocked range (the delivery-time policy, judged now
 * rather than on every attempt) and `localhost` and names under `.localhost`, which always resolve
 * to loopback (RFC 6761). Other names are judged where they resolve: at delivery.
 */
export function callbackTargetProblem(text: string): string | undefined {
  const refuse = (why: string) => `callback_url must not point at a private or reserved address (${why})`;
  const { hostname } = new URL(text);
  const ip = parseIpLiteralHost(hostname);
  if (ip !== undefined) {
    const reason = blockedAddressReason(ip);
    return reason === undefined ? undefined : refuse(`${ip} is ${reason}`);
  }
  // WHATWG lower-cases names; a trailing dot names the same host.
  const name = hostname.replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost')
    ? refuse(`${hostname} always resolves to loopback`)
    : undefined;
}

/** A Standard Webhooks secret: `whsec_` and 32 random bytes in base64 (registration without a secret, rotation). */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** Why `text` is not an acceptable signing secret, or undefined when it is. */
export function secretProblem(text: string): string | undefined {
  if (text.length === 0) return 'secret must not be empty';
  if (text.length > SECRET_MAX_CHARS) return `secret must be at most ${SECRET_MAX_CHARS} characters`;
  if (text.startsWith('whsec_')) {
    // Standard Webhooks secrets: the part after the prefix is the base64 key.
    const rest = text.slice('whsec_'.length);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(rest) || Buffer.from(rest, 'base64').length < 16) {
      return 'a secret starting with whsec_ must be followed by base64 of at least 16 bytes';
    }
  }
  return undefined;
}

const withProblem = (schema: z.ZodString, problem: (text: string) => string | undefined) =>
  schema.superRefine((text, ctx) => {
    const message = problem(text);
    if (message !== undefined) ctx.addIssue({ code: 'custom', message });
  });

const eventTypeSchema = z
  .enum(WEBHOOK_EVENT_TYPES, {
    error: (issue) =>
      issue.input === undefined
        ? 'event_type is required'
        : `event_type must be one of ${WEBHOOK_EVENT_TYPES.join(', ')}`,
  })
  .describe('The event type this webhook receives.');

const callbackUrlSchema = withProblem(requiredString('callback_url'), callbackUrlProblem).describe(
  'http(s) URL that receives the events; at most 2048 characters, no credentials or fragment.',
);

const secretSchema = withProblem(requiredString('secret'), secretProblem).describe(
  'Shared secret for the HMAC signatures; non-empty, at most 512 characters. A `whsec_` prefix marks a base64 key (Standard Webhooks). ' +
    'Absent on a webhook signing with hmac (the default): Hookline generates a whsec_ secret and answers it in the 201, once.',
);

/** An optional whole-number setting from 1 to `max`, refused with one message naming the field. */
function boundedIntegerSchema(field: string, max: number) {
  const problem = `${field} must be an integer from 1 to ${max}`;
  return z.number({ error: problem }).int({ error: problem }).min(1, { error: problem }).max(max, { error: problem });
}

const rateLimitSchema = boundedIntegerSchema('rate_limit_per_second', RATE_LIMIT_PER_SECOND_MAX).describe(
  `Sends to this webhook in any one second at most, over all workers (1 to ${RATE_LIMIT_PER_SECOND_MAX}); absent: unlimited. ` +
    'Up to this many may go at once, then none until the second has passed. Deliveries over it wait in the queue; ' +
    'waiting is not a failed attempt.',
);

const maxConcurrencySchema = boundedIntegerSchema('max_concurrency', MAX_CONCURRENCY_MAX).describe(
  `Attempts in flight to this webhook's endpoint at most, per worker (1 to ${MAX_CONCURRENCY_MAX}); absent: the worker's send slots. ` +
    'The ceiling of the adaptive limit: each worker halves its limit when the endpoint answers 429 or 503, times out or refuses ' +
    'connections, and grows it by one after a window of successes.',
);

const signatureSchema = z
  .enum(SIGNATURE_SCHEMES, { error: `signature must be one of ${SIGNATURE_SCHEMES.join(', ')}` })
  .describe(
    'How deliveries are signed. hmac (the default): webhook-signature v1 entries and the legacy x-webhook-signature, by the secret. ' +
      'ed25519: also a v1a entry (Standard Webhooks asymmetric), by a key pair of the webhook that Hookline generates; ' +
      'receivers verify with its public key (GET /vendors/v1/webhooks/{id}/public-keys, or /.well-known/jwks.json) and need no secret. ' +
      'The v1 and legacy headers are sent only while the webhook also has a secret.',
  );

const FILTER_DESCRIPTION =
  'Only events that match are delivered (docs/receiving-webhooks.md, "Payload filters"). One node: {"path": "data.status", "eq": "unavailable"} ' +
  '(eq, ne, in, gt, gte, lt, lte, exists), or {"and": [...]}, {"or": [...]}, {"not": {...}}. Paths: event_type, event_id, ' +
  'timestamp, version, or data and keys below it. At most 6 levels, 50 nodes and 4 KiB.';

/** A payload filter as a vendor sent it, checked by parseFilter (its problem names the bad part). */
function checkedFilter(input: unknown, ctx: z.core.$RefinementCtx): FilterNode {
  const parsed = parseFilter(input);
  if (parsed.ok) return parsed.filter;
  ctx.addIssue({ code: 'custom', message: parsed.problem });
  return z.NEVER;
}

const FILTER_META = {
  description: FILTER_DESCRIPTION,
  examples: [
    {
      and: [
        { path: 'data.status', eq: 'unavailable' },
        { path: 'data.hardware_specs.gpus.0.name', in: ['NVIDIA A100 80GB PCIe', 'NVIDIA H100 80GB HBM3'] },
        { path: 'data.hardware_specs.memory.total_memory', gte: 256 },
      ],
    },
  ],
};

/** A stored filter as answers show it (checked when it was stored). */
export const filterViewSchema = z.record(z.string(), z.unknown()).meta({ id: 'Filter', ...FILTER_META });

const filterSchema = z.unknown().transform(checkedFilter).meta(FILTER_META);
/** As filterSchema, with null passing as null (PATCH removes the filter with it). */
export const nullableFilterSchema = z
  .unknown()
  .transform((input, ctx) => (input === null ? null : checkedFilter(input, ctx)))
  .meta(FILTER_META);

const RETENTION_RE = /^([1-9][0-9]{0,5})(m|h|d)$/;
const RETENTION_PROBLEM =
  'retention must be a whole number of minutes, hours or days, such as "30m", "24h" or "3d", at least 1m';
const RETENTION_UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Milliseconds of a retention as the API writes it (`30m`, `24h`, `3d`), or undefined when it is not one. */
export function parseRetentionMs(text: string): number | undefined {
  const match = RETENTION_RE.exec(text);
  if (!match) return undefined;
  return Number(match[1]) * RETENTION_UNIT_MS[match[2] as keyof typeof RETENTION_UNIT_MS];
}

/** A retention as the API writes it: whole days when it is some, else whole hours, else minutes. */
export function formatRetention(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  return ms % 3_600_000 === 0 ? `${ms / 3_600_000}h` : `${Math.round(ms / 60_000)}m`;
}

const propagateTraceSchema = z
  .boolean()
  .describe(
    'Send a W3C traceparent header with each attempt, naming the attempt’s span in the event’s trace (the producer’s ' +
      'when it sent one), so the receiver’s own spans join it. Default false.',
  );

const retentionSchema = z
  .string({ error: RETENTION_PROBLEM })
  .refine((text) => parseRetentionMs(text) !== undefined, { error: RETENTION_PROBLEM })
  .describe(
    'How long this webhook’s events (the event feed, range replays), payloads and delivery records are kept, such as "30m", ' +
      '"24h" or "3d": at least 1m and at most the installation’s retention (HOOKLINE_RETENTION, 7d by default); absent: that ' +
      'retention. A delivery still being tried keeps its record until its retention after its last attempt.',
  );

/** A webhook's retry policy (API `retry`): its own delays between attempts, and the age past which a delivery is dead-lettered. */
export interface RetryPolicy {
  /** Delays before the 2nd, 3rd, … attempt (ms); undefined: the installation's schedule. */
  scheduleMs?: number[];
  /** A delivery not delivered this long after its acceptance is dead-lettered (`max_age_expired`); undefined: no bound but the schedule's. */
  maxAgeMs?: number;
}

/** Retry delays and max_age are whole seconds, minutes, hours or days: `30s`, `5m`, `2h`, `1d`. */
const RETRY_DURATION_RE = /^([1-9][0-9]{0,6})(s|m|h|d)$/;
const RETRY_UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** Retries a webhook's own schedule lists at most (the installation's schedule bounds it further). */
const RETRY_SCHEDULE_MAX = 50;

/** Milliseconds of a retry duration as the API writes it (`30s`, `5m`, `2h`, `1d`), or undefined when it is not one. */
export function parseRetryDurationMs(text: string): number | undefined {
  const match = RETRY_DURATION_RE.exec(text);
  return match ? Number(match[1]) * RETRY_UNIT_MS[match[2] as keyof typeof RETRY_UNIT_MS] : undefined;
}

const retryDurationProblem = (field: string) =>
  `${field} must be a whole number of seconds, minutes, hours or days, such as "30s", "5m", "2h" or "1d"`;
const retryDurationSchema = (field: string) =>
  z
    .string({ error: retryDurationProblem(field) })
    .refine((text) => parseRetryDurationMs(text) !== undefined, { error: retryDurationProblem(field) });

const retrySchema = z
  .strictObject(
    {
      schedule: z
        .array(retryDurationSchema('each retry.schedule entry'), {
          error: 'retry.schedule must be a list of durations',
        })
        .min(1, { error: 'retry.schedule must list at least one retry' })
        .max(RETRY_SCHEDULE_MAX, { error: `retry.schedule lists at most ${RETRY_SCHEDULE_MAX} retries` })
        .optional()
        .describe(
          'The delays before the 2nd, 3rd, … attempt after a failed one, such as ["30s", "5m", "1h"]: as many retries as ' +
            'listed, each delay spread ±20 % as the installation’s are. The first attempt goes as the installation’s schedule ' +
            'says (HOOKLINE_RETRY_SCHEDULE’s first entry). At most as many retries as the installation’s schedule, and a sum ' +
            'no longer than its (400 otherwise). Absent: the installation’s schedule.',
        ),
      max_age: retryDurationSchema('retry.max_age')
        .optional()
        .describe(
          'A delivery not delivered this long after its event was accepted is dead-lettered, unsent, as max_age_expired ' +
            '(replayable), whatever held it (retries, an open circuit, a rate limit, a pause); a retry due later is made at ' +
            'that moment instead, to be dead-lettered then. For events whose state goes stale: a MACHINE_UPDATED an hour old ' +
            'is better not sent. At most the installation’s whole retry window (400 otherwise). Absent: no bound but the schedule’s.',
        ),
    },
    {
      error: (issue) =>
        issue.code === 'unrecognized_keys'
          ? `unknown field ${issue.keys.map((k) => `"retry.${k}"`).join(', ')}`
          : 'retry must be an object with schedule and/or max_age',
    },
  )
  .refine((retry) => retry.schedule !== undefined || retry.max_age !== undefined, {
    error: 'retry must set schedule, max_age or both (null removes the policy)',
    // Only for an object that is otherwise valid: an unknown field is the one problem to name then.
    when: (payload) => payload.issues.length === 0,
  })
  .describe('This webhook’s retry policy: its own retry delays and the age past which a delivery is not sent.');

/** The retry policy of a request body, in milliseconds (already checked by the schema). */
export function retryPolicyOf(input: { schedule?: string[] | undefined; max_age?: string | undefined }): RetryPolicy {
  return {
    ...(input.schedule === undefined ? {} : { scheduleMs: input.schedule.map((d) => parseRetryDurationMs(d)!) }),
    ...(input.max_age === undefined ? {} : { maxAgeMs: parseRetryDurationMs(input.max_age)! }),
  };
}

/** Why `policy` is not within the installation's schedule `installationMs`, or undefined when it is. */
export function retryPolicyProblem(policy: RetryPolicy, installationMs: readonly number[]): string | undefined {
  const window = installationMs.reduce((sum, ms) => sum + ms, 0);
  const retries = installationMs.length - 1;
  if (policy.scheduleMs !== undefined) {
    if (policy.scheduleMs.length > retries)
      return `retry.schedule lists at most the installation's ${retries} retries (HOOKLINE_RETRY_SCHEDULE)`;
    const sum = (installationMs[0] ?? 0) + policy.scheduleMs.reduce((total, ms) => total + ms, 0);
    if (sum > window)
      return `retry.schedule must add up to at most the installation's retry window, ${describeDurationMs(window)}`;
  }
  if (policy.maxAgeMs !== undefined && policy.maxAgeMs > window)
    return `retry.max_age must be at most the installation's retry window, ${describeDurationMs(window)}`;
  return undefined;
}

/** Effective schedules, per webhook copy (a copy is immutable; a changed webhook is a new copy). */
const schedules = new WeakMap<Webhook, readonly number[]>();

/**
 * The schedule a webhook's deliveries follow: the installation's first delay (the first attempt),
 * then the webhook's own retry delays; the installation's schedule when the webhook has none. A
 * policy stored under a longer installation schedule keeps no more retries than the current one
 * allows (the queue's attempts are sized by it).
 */
export function retryScheduleOf(webhook: Webhook, installationMs: readonly number[]): readonly number[] {
  const own = webhook.retry?.scheduleMs;
  if (own === undefined) return installationMs;
  let schedule = schedules.get(webhook);
  if (schedule === undefined) {
    schedule = [installationMs[0] ?? 0, ...own.slice(0, Math.max(0, installationMs.length - 1))];
    schedules.set(webhook, schedule);
  }
  return schedule;
}

const includeFieldsSchema = z
  .array(z.unknown(), { error: 'include_fields must be a list of paths' })
  .min(1, { error: 'include_fields must name at least one path (null sends every field)' })
  .max(INCLUDE_FIELDS_MAX, { error: `include_fields names at most ${INCLUDE_FIELDS_MAX} paths` })
  .transform((paths, ctx) => {
    paths.forEach((path, i) => {
      const problem = includeFieldProblem(path, `include_fields[${i}]`);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
    });
    return [...new Set(paths as string[])];
  })
  .describe(
    'Only these paths of data are sent, such as ["data.status", "data.pricing"] (paths named as payload filters name them; ' +
      'a list at a path is sent whole); the rest of data is left out. The envelope (version, event_id, event_type, timestamp) ' +
      `and the event's identifiers (${IDENTIFIER_PATHS.join(', ')}) are always sent. The signature covers the body as sent. ` +
      'Absent: every field.',
  );

const WEBHOOK_PRIORITIES = ['high', 'normal'] as const;
export type WebhookPriority = (typeof WEBHOOK_PRIORITIES)[number];

const prioritySchema = z
  .enum(WEBHOOK_PRIORITIES, { error: 'priority must be "high" or "normal"' })
  .describe(
    'high: when the endpoint (this vendor’s callback origin) is held back (its adaptive concurrency limit reached, its ' +
      'circuit letting deliveries back after an outage, a first contact), this webhook’s deliveries go before the normal ' +
      'ones of the vendor’s other webhooks on that origin, so a DEPLOYMENT_STOPPED is not stuck behind a backlog of ' +
      'MACHINE_UPDATED. A rate limit is the webhook’s own and is not shared. normal (the default): in the order they came.',
  );

export const WEBHOOK_ORDERINGS = ['fifo', 'none'] as const;
export type WebhookOrdering = (typeof WEBHOOK_ORDERINGS)[number];

const orderingSchema = z
  .enum(WEBHOOK_ORDERINGS, { error: 'ordering must be "fifo" or "none"' })
  .describe(
    'fifo: deliveries go out one at a time, in the order the events were accepted, over all workers (with ordering_key: one ' +
      'at a time per line of key values); a delivery that fails holds back the ones behind it until it is delivered or ' +
      'dead-lettered. none (the default): deliveries go out concurrently.',
  );

/** The rule across fields of ordering_key, on registration and on the webhook a PATCH would leave. */
export const ORDERING_KEY_NEEDS_FIFO = 'ordering_key needs ordering fifo (set ordering_key null to switch to none)';

const orderingKeySchema = withProblem(requiredString('ordering_key'), orderingKeyProblem).describe(
  'With ordering fifo only (400 otherwise): a path into the delivered envelope, named as payload filters name paths ' +
    '(data.metadata.machine_id), whose value splits the webhook’s deliveries into lines: order is kept among the deliveries ' +
    'of one value, different values go out in parallel, and a delivery that fails holds back only its own line. Values are ' +
    `hashed into ${ORDERING_KEY_BUCKETS} lines per webhook, so values that share a line keep order with each other too. ` +
    'An event without a string, number or boolean at the path goes to one line of its own for such events. ' +
    'Absent: one line for the whole webhook.',
);

export const webhookCreateSchema = z
  .strictObject(
    {
      event_type: eventTypeSchema,
      callback_url: callbackUrlSchema,
      secret: secretSchema.optional(),
      rate_limit_per_second: rateLimitSchema.optional(),
      signature: signatureSchema.optional(),
      filter: filterSchema.optional(),
      ordering: orderingSchema.optional(),
      ordering_key: orderingKeySchema.optional(),
      max_concurrency: maxConcurrencySchema.optional(),
      retention: retentionSchema.optional(),
      retry: retrySchema.optional(),
      include_fields: includeFieldsSchema.optional(),
      priority: prioritySchema.optional(),
      propagate_trace: propagateTraceSchema.optional(),
      headers: headersInputSchema.optional(),
      auth: authInputSchema.optional(),
      tls_client_certificate: clientCertificateInputSchema.optional(),
    },
    {
      error: (issue) =>
        issue.code === 'unrecognized_keys'
          ? `unknown field ${issue.keys.map((k) => `"${k}"`).join(', ')}`
          : 'the body must be a JSON object',
    },
  )
  .superRefine((body, ctx) => {
    if (body.ordering_key !== undefined && body.ordering !== 'fifo')
      ctx.addIssue({ code: 'custom', message: ORDERING_KEY_NEEDS_FIFO, path: ['ordering_key'] });
  });

export const webhookPatchSchema = z
  .strictObject(
    {
      event_type: eventTypeSchema.optional(),
      callback_url: callbackUrlSchema
        .optional()
        .describe(
          'A new callback URL. On another origin (scheme, host or port), the webhook’s custom headers and auth must be given ' +
            'again in the same request, or null to drop them (409 credentials_not_restated otherwise).',
        ),
      secret: secretSchema
        .nullable()
        .optional()
        .describe(
          'A new secret starts a rotation: for the overlap period (24 h by default) webhook-signature carries a signature by each ' +
            'secret, and the one-value legacy x-webhook-signature stays signed with the previous secret, which every receiver ' +
            'already holds; it switches to the new secret when the overlap ends (previous_secret_expires_at in the answer). ' +
            'null removes the secret at once (no v1 or legacy signature from then on; v1a alone): only with signature ed25519, ' +
            'set already or in the same request; on an hmac webhook it answers 400, as the webhook would go unsigned.',
        ),
      enabled: z
        .boolean({ error: 'enabled must be true or false' })
        .optional()
        .describe(
          'true re-enables a webhook that was disabled (410 Gone or sustained failures) or paused; false pauses it. A paused ' +
            'webhook’s deliveries are held, unsent and spending no attempts, and go out at once when it is enabled; one still ' +
            'held at the end of its retry window (counted from its acceptance) is dead-lettered as paused_expired, replayable. ' +
            'A webhook the engine disabled dead-letters its deliveries at once (webhook_disabled).',
        ),
      rate_limit_per_second: rateLimitSchema
        .nullable()
        .optional()
        .describe('A new limit; null removes it (unlimited).'),
      signature: signatureSchema
        .optional()
        .describe(
          'ed25519 generates the webhook’s key pair (if it has none) and adds v1a; hmac stops v1a and drops the keys, and generates ' +
            'a whsec_ secret (in the answer) when the webhook has none and the request sets none.',
        ),
      filter: nullableFilterSchema
        .optional()
        .describe('A new filter; null removes it (every event of the type is delivered).'),
      ordering: orderingSchema
        .optional()
        .describe(
          'fifo or none. Deliveries already queued keep the way they were queued: after a switch to fifo, those queued before ' +
            'it may still go out beside the line; after a switch to none, the line still goes out in order, and new ones concurrently.',
        ),
      ordering_key: orderingKeySchema
        .nullable()
        .optional()
        .describe(
          'A new ordering key; null removes it (one line for the whole webhook). Deliveries already in a line stay in it and go ' +
            'out in its order; new ones join the lines of the new key at once, beside them, so until the old lines are empty a ' +
            'delivery accepted after the change may go out before an older one of the same value. None is lost or sent twice.',
        ),
      max_concurrency: maxConcurrencySchema
        .nullable()
        .optional()
        .describe('A new ceiling; null removes it (the worker’s send slots).'),
      retention: retentionSchema
        .nullable()
        .optional()
        .describe(
          'A new retention; null returns to the installation’s. A shorter one removes what it no longer covers within minutes.',
        ),
      retry: retrySchema
        .nullable()
        .optional()
        .describe(
          'A new retry policy (replacing the old as a whole); null returns to the installation’s schedule. Deliveries already ' +
            'waiting follow it from their next attempt.',
        ),
      include_fields: includeFieldsSchema
        .nullable()
        .optional()
        .describe(
          'New paths (replacing the old); null sends every field again. Applies to events accepted from then on.',
        ),
      priority: prioritySchema.optional(),
      propagate_trace: propagateTraceSchema.optional(),
      headers: headersPatchSchema.nullable().optional(),
      auth: authInputSchema
        .nullable()
        .optional()
        .describe('New receiver authentication (replacing the old); null removes it.'),
      tls_client_certificate: clientCertificateInputSchema
        .nullable()
        .optional()
        .describe('A new client certificate and key (replacing the old); null removes it.'),
    },
    {
      error: (issue) =>
        issue.code === 'unrecognized_keys'
          ? `unknown field ${issue.keys.map((k) => `"${k}"`).join(', ')}`
          : 'the body must be a JSON object',
    },
  )
  .refine(
    (body) => Object.keys(body).length > 0,
    'the body must set at least one of event_type, callback_url, secret, enabled, rate_limit_per_second, max_concurrency, retention, retry, include_fields, priority, propagate_trace, ordering, ordering_key, signature, filter, headers, auth, tls_client_certificate',
  );

export const webhookResourceSchema = z
  .object({
    webhook_id: z.string().describe('Assigned by the service (UUID).'),
    event_type: z.enum(WEBHOOK_EVENT_TYPES),
    callback_url: z.string(),
    secret: z.string().optional().describe('Present only when the webhook has a secret (and the caller may see it).'),
    has_secret: z
      .boolean()
      .describe(
        'Whether a secret signs its deliveries (webhook-signature v1 and x-webhook-signature), shown also where the secret is not. ' +
          'false on an ed25519 webhook signing with its key pair alone, and on an hmac webhook registered before secrets were ' +
          'generated: its deliveries go unsigned until the secret is rotated.',
      ),
    previous_secret_expires_at: z
      .string()
      .optional()
      .describe(
        'Present only during a secret rotation: when (ISO 8601) the previous secret stops signing. Until then the legacy ' +
          'x-webhook-signature header is signed with the previous secret; from then on with the current one, so a receiver that ' +
          'checks only that header switches to the new secret at this time.',
      ),
    enabled: z.boolean().describe('false when deliveries are paused: disabled by the engine or by the vendor.'),
    disabled_reason: z
      .enum(DISABLED_REASONS)
      .optional()
      .describe(
        'Why the webhook is disabled: gone (the receiver answered 410), failing (every delivery failed for the sustained-failure window) or paused ' +
          '(PATCH enabled=false: deliveries are held until it is enabled, up to the end of their retry window).',
      ),
    rate_limit_per_second: z
      .number()
      .int()
      .nullable()
      .describe('Sends per second at most over all workers; null: unlimited.'),
    signature: z
      .enum(SIGNATURE_SCHEMES)
      .describe('hmac, or ed25519: deliveries also carry a v1a signature by the webhook’s key pair.'),
    filter: filterViewSchema.nullable().describe('The payload filter; null: every event of the type is delivered.'),
    ordering: z
      .enum(WEBHOOK_ORDERINGS)
      .describe(
        'fifo: one delivery at a time (per line of ordering_key values), in accept order; none: concurrent deliveries.',
      ),
    ordering_key: z
      .string()
      .nullable()
      .describe(
        'The path whose value splits a FIFO webhook’s deliveries into lines kept in order each; null: one line for the webhook.',
      ),
    max_concurrency: z
      .number()
      .int()
      .nullable()
      .describe('Attempts in flight to the endpoint at most, per worker; null: the worker’s send slots.'),
    retention: z
      .string()
      .nullable()
      .describe('How long its events, payloads and delivery records are kept; null: the installation’s retention.'),
    retry: z
      .object({
        schedule: z
          .array(z.string())
          .nullable()
          .describe('The delays before the 2nd, 3rd, … attempt; null: the installation’s schedule.'),
        max_age: z
          .string()
          .nullable()
          .describe(
            'Deliveries not delivered this long after acceptance are dead-lettered (max_age_expired); null: no bound.',
          ),
      })
      .nullable()
      .describe('The webhook’s retry policy; null: the installation’s schedule and no max_age.'),
    include_fields: z
      .array(z.string())
      .nullable()
      .describe('The paths of data its deliveries carry (with the identifiers); null: every field.'),
    priority: z
      .enum(WEBHOOK_PRIORITIES)
      .describe(
        'high: its deliveries go first where its endpoint holds deliveries back; normal: in the order they came.',
      ),
    propagate_trace: z
      .boolean()
      .describe('Each request carries a W3C traceparent header naming the attempt in the event’s trace.'),
    headers: z
      .record(z.string(), z.string())
      .describe('The custom request headers, each value masked (••••); {} when there are none.'),
    auth: authViewSchema.nullable().describe('The receiver authentication (type and non-secret fields); null: none.'),
    tls_client_certificate: clientCertificateViewSchema
      .nullable()
      .describe('The TLS client certificate, described (never its key); null: none.'),
    created_at: z.string().describe('ISO 8601 time of registration.'),
    updated_at: z.string().describe('ISO 8601 time of the last change.'),
  })
  .meta({ id: 'Webhook' });

export type WebhookResource = z.infer<typeof webhookResourceSchema>;

/** A webhook as the engine holds it, with its secrets in plaintext (only ever in memory). */
export interface Webhook {
  id: string;
  vendorId: string;
  eventType: WebhookEventType;
  callbackUrl: string;
  secret: string | undefined;
  /** The secret replaced by the last rotation, still signing until `untilMs`. */
  previousSecret: { secret: string; untilMs: number } | undefined;
  /** Set while deliveries are paused. */
  disabled: { reason: DisabledReason; atMs: number } | undefined;
  /** Sends per second at most, over all workers; undefined: unlimited. */
  rateLimitPerSecond: number | undefined;
  signature: SignatureScheme;
  /** Ed25519 key pairs (`signature: "ed25519"`): the current one first, then one in its rotation overlap. */
  signingKeys: SigningKey[];
  /** Only events that match are delivered; undefined: every event of the type. */
  filter: FilterNode | undefined;
  /** fifo: one delivery at a time, in accept order (see delivery/fifo-driver.ts). */
  ordering: WebhookOrdering;
  /** With `ordering: fifo`: the path whose value picks the line of each delivery (domain/ordering-key.ts); undefined: one line. */
  orderingKey: string | undefined;
  /** Attempts in flight to its endpoint at most, per worker; undefined: the worker's send slots. */
  maxConcurrency: number | undefined;
  /** How long its events and delivery records are kept (ms); undefined: the installation's retention. */
  retentionMs: number | undefined;
  /** Its own retry delays and max age; undefined: the installation's schedule, no max age. */
  retry: RetryPolicy | undefined;
  /** The paths of `data` its deliveries carry (domain/field-selection.ts); undefined: every field. */
  includeFields: string[] | undefined;
  /** high: admitted before the vendor's normal deliveries where their endpoint holds deliveries back. */
  priority: WebhookPriority;
  /** Each attempt's request carries a W3C `traceparent` (the attempt's span in the event's trace). */
  propagateTrace: boolean;
  /** Custom request headers in the order given; values undefined in a process without the key. */
  headers: { name: string; value: string | undefined }[];
  auth: ReceiverAuth | undefined;
  clientCertificate: ClientCertificate | undefined;
  createdAt: string;
  updatedAt: string;
}

/** The secrets that sign a delivery at `nowMs`: the current one first, then one in its rotation overlap. */
export function signingSecrets(webhook: Webhook, nowMs: number): string[] {
  const secrets = webhook.secret === undefined ? [] : [webhook.secret];
  const previous = previousSecretAt(webhook, nowMs);
  if (previous) secrets.push(previous.secret);
  return secrets;
}

/** The Ed25519 keys that sign a delivery at `nowMs` (none unless `signature` is ed25519): the current one first. */
export function webhookSigningKeys(webhook: Webhook, nowMs: number): SigningKey[] {
  return webhook.signature === 'ed25519' ? signingKeysAt(webhook.signingKeys, nowMs) : [];
}

/** The replaced secret while its rotation overlap lasts at `nowMs`, else undefined. */
function previousSecretAt(webhook: Webhook, nowMs: number): Webhook['previousSecret'] {
  return webhook.previousSecret && webhook.previousSecret.untilMs > nowMs ? webhook.previousSecret : undefined;
}

/**
 * The interface's resource shape at `nowMs`: `secret` only when one is set, and
 * `previous_secret_expires_at` only while a replaced secret still signs (never that secret itself).
 */
export function toWebhookResource(webhook: Webhook, nowMs: number): WebhookResource {
  const previousUntilMs = previousSecretAt(webhook, nowMs)?.untilMs;
  return {
    webhook_id: webhook.id,
    event_type: webhook.eventType,
    callback_url: webhook.callbackUrl,
    ...(webhook.secret === undefined ? {} : { secret: webhook.secret }),
    has_secret: webhook.secret !== undefined,
    ...(previousUntilMs === undefined ? {} : { previous_secret_expires_at: new Date(previousUntilMs).toISOString() }),
    enabled: webhook.disabled === undefined,
    ...(webhook.disabled === undefined ? {} : { disabled_reason: webhook.disabled.reason }),
    rate_limit_per_second: webhook.rateLimitPerSecond ?? null,
    signature: webhook.signature,
    filter: webhook.filter ?? null,
    ordering: webhook.ordering,
    ordering_key: webhook.orderingKey ?? null,
    max_concurrency: webhook.maxConcurrency ?? null,
    retention: webhook.retentionMs === undefined ? null : formatRetention(webhook.retentionMs),
    retry:
      webhook.retry === undefined
        ? null
        : {
            schedule: webhook.retry.scheduleMs?.map((ms) => formatDurationMs(ms)) ?? null,
            max_age: webhook.retry.maxAgeMs === undefined ? null : formatDurationMs(webhook.retry.maxAgeMs),
          },
    include_fields: webhook.includeFields ?? null,
    priority: webhook.priority,
    propagate_trace: webhook.propagateTrace,
    headers: maskedHeaders(webhook.headers),
    auth: webhook.auth === undefined ? null : toAuthView(webhook.auth),
    tls_client_certificate:
      webhook.clientCertificate === undefined ? null : toClientCertificateView(webhook.clientCertificate),
    created_at: webhook.createdAt,
    updated_at: webhook.updatedAt,
  };
}
