import type { HooklineEnvelope } from '@hookline/verify';
import { z } from 'zod';
import { agentStatusSchema } from './agent.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from './events.js';
import { externalIdSchema, isUuid, LOWER_CASE_UUID_RE } from './ids.js';
import { nestsDeeperThan } from './json-depth.js';
import { machineSchema } from './machine.js';
import { taskSchema } from './task.js';

/**
 * The events ingest accepts (docs/api.md "Ingest"): the six webhook event
 * types, which are projected into the read models and delivered, and `TASK_UPDATED`, which only
 * updates the task read model and is never delivered.
 */

const TASK_UPDATED = 'TASK_UPDATED';

export const INGEST_EVENT_TYPES = [...WEBHOOK_EVENT_TYPES, TASK_UPDATED] as const;

/** Most events one ingest request (or one producer batch) may carry. */
export const EVENT_BATCH_SIZE_MAX = 1000;

/** The version field of the envelope vendors receive. */
const ENVELOPE_VERSION = '1.0';

/**
 * Most levels of objects and arrays within one another in an event's `data` (`data` itself is the
 * first). A machine nests four deep; the bound leaves room for any real payload while keeping
 * serialisation and every walk of the event far from the stack's limit.
 */
const DATA_LEVELS_MAX = 64;

/** The problem of a value nested deeper than DATA_LEVELS_MAX, naming where (`data`, `event.data`); undefined when it is not. */
export function nestingProblem(value: unknown, at: string): string | undefined {
  return nestsDeeperThan(value, DATA_LEVELS_MAX)
    ? `${at}: nested more than ${DATA_LEVELS_MAX} levels deep (objects and arrays within one another)`
    : undefined;
}

/** Longest reason a rejected event gets, in characters. */
const REASON_LENGTH_MAX = 500;
/** Issues one reason names; the rest are counted. */
const REASON_ISSUES_MAX = 3;

const eventIdSchema = z
  .string()
  .refine(isUuid, 'must be a UUID (8-4-4-4-12 hex digits)')
  .describe(
    'Idempotency key (UUID); assigned at acceptance when absent. Re-sending the same event_id is a no-op for at least 24 h.',
  );

const timestampSchema = z.iso
  .datetime({ offset: true, error: 'must be an ISO 8601 date-time with a UTC offset, e.g. 2024-05-01T12:00:00Z' })
  .describe(
    'When the event happened (ISO 8601 with Z or ±hh:mm); defaults to the time of acceptance. Orders read-model updates: an older event never overwrites newer state.',
  );

const vendorIdSchema = externalIdSchema.describe(
  'The vendor the event concerns; its webhook for this event_type receives the event.',
);

/** What a machine removal needs: the id of the machine. */
const machineRefSchema = z
  .object({
    metadata: z.object({ machine_id: externalIdSchema.describe('Unique identifier of the machine.') }),
  })
  .meta({ id: 'MachineRef', description: 'Identifies a machine by metadata.machine_id.' });

/** A removal's data: the full Machine when it validates as one, otherwise just `{ metadata: { machine_id } }`. */
const machineRemovedDataSchema = z.union([machineSchema, machineRefSchema]);

/**
 * What each webhook event type carries in `data`: ingest validates it with this schema, and vendors
 * receive it (as sent) in the envelope, so the OpenAPI document's webhooks section shows the same.
 */
const WEBHOOK_EVENTS = {
  EVENT_TYPE_MACHINE_CREATED: { data: machineSchema, description: 'A machine was created; data is the Machine.' },
  EVENT_TYPE_MACHINE_UPDATED: { data: machineSchema, description: 'A machine changed; data is the whole Machine.' },
  EVENT_TYPE_MACHINE_REMOVED: {
    data: machineRemovedDataSchema,
    description: 'A machine was removed; data needs only metadata.machine_id (a full Machine is accepted too).',
  },
  EVENT_TYPE_DEPLOYMENT_CREATED: {
    data: agentStatusSchema,
    description: 'A deployment was created; data is its agent deployment status.',
  },
  EVENT_TYPE_DEPLOYMENT_UPDATED: {
    data: agentStatusSchema,
    description: 'A deployment changed; data is its agent deployment status.',
  },
  EVENT_TYPE_DEPLOYMENT_STOPPED: {
    data: agentStatusSchema,
    description: 'A deployment stopped; data is its agent deployment status.',
  },
} as const satisfies Record<WebhookEventType, { data: z.ZodType; description: string }>;

// Envelope fields are strict (an unknown one is a misplaced field, rejected with its name); `data`
// schemas strip what they do not name, but only from the read models' copy: vendors receive the
// data as it was sent (see `sentData`).
function webhookEvent<const T extends WebhookEventType, D extends z.ZodType>(
  eventType: T,
  event: { data: D; description: string },
) {
  return z
    .strictObject({
      event_id: eventIdSchema.optional(),
      event_type: z.literal(eventType),
      vendor_id: vendorIdSchema,
      timestamp: timestampSchema.optional(),
      data: event.data,
    })
    .meta({ description: event.description });
}

const taskUpdatedEvent = z
  .strictObject({
    event_id: eventIdSchema.optional(),
    event_type: z.literal(TASK_UPDATED),
    vendor_id: vendorIdSchema.optional(),
    timestamp: timestampSchema.optional(),
    data: taskSchema,
  })
  .meta({
    description: 'A task changed status; updates GET /rental/v1/tasks/{task_id} and is never delivered to webhooks.',
  });

/**
 * One ingest event, discriminated by `event_type`. An unknown top-level field is an error; unknown
 * fields inside `data` are accepted (and delivered as sent).
 */
export const ingestEventSchema = z
  .discriminatedUnion(
    'event_type',
    [
      webhookEvent('EVENT_TYPE_MACHINE_CREATED', WEBHOOK_EVENTS.EVENT_TYPE_MACHINE_CREATED),
      webhookEvent('EVENT_TYPE_MACHINE_UPDATED', WEBHOOK_EVENTS.EVENT_TYPE_MACHINE_UPDATED),
      webhookEvent('EVENT_TYPE_MACHINE_REMOVED', WEBHOOK_EVENTS.EVENT_TYPE_MACHINE_REMOVED),
      webhookEvent('EVENT_TYPE_DEPLOYMENT_CREATED', WEBHOOK_EVENTS.EVENT_TYPE_DEPLOYMENT_CREATED),
      webhookEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', WEBHOOK_EVENTS.EVENT_TYPE_DEPLOYMENT_UPDATED),
      webhookEvent('EVENT_TYPE_DEPLOYMENT_STOPPED', WEBHOOK_EVENTS.EVENT_TYPE_DEPLOYMENT_STOPPED),
      taskUpdatedEvent,
    ],
    {
      error: (issue) =>
        (issue.input as { event_type?: unknown } | undefined)?.event_type === undefined
          ? `required: one of ${INGEST_EVENT_TYPES.join(', ')}`
          : `must be one of ${INGEST_EVENT_TYPES.join(', ')}`,
    },
  )
  .meta({ id: 'IngestEvent', description: 'An event for ingest: event_type decides the shape of data.' });

/** An event as a producer writes it. */
export type IngestEventInput = z.input<typeof ingestEventSchema>;

type ParsedEvent = z.output<typeof ingestEventSchema>;

type Normalised<E> = E extends unknown
  ? Omit<E, 'event_id' | 'timestamp'> & {
      /** Lower-case UUID, given or assigned. */
      event_id: string;
      /** ISO 8601, UTC, milliseconds. */
      timestamp: string;
      /** The same instant in Unix ms: the version of the read-model write. */
      timestampMs: number;
      /**
       * `data` exactly as the producer sent it: what vendors receive. `data` itself is the validated
       * form the read models use (unnamed fields stripped, defaults filled in).
       */
      sentData: unknown;
    }
  : never;

/** A validated event with its id and time settled. */
export type AcceptedEvent = Normalised<ParsedEvent>;

/** An accepted event that is delivered to webhooks (every type but TASK_UPDATED). */
export type WebhookEvent = Exclude<AcceptedEvent, { event_type: typeof TASK_UPDATED }>;

export function isWebhookEvent(event: AcceptedEvent): event is WebhookEvent {
  return event.event_type !== TASK_UPDATED;
}

/** The outcome of one event of an ingest batch, in input order. */
export const eventResultSchema = z
  .object({
    event_id: z
      .string()
      .optional()
      .describe('The event id (assigned when the event had none); absent for a rejected event without a valid one.'),
    status: z
      .enum(['accepted', 'duplicate', 'rejected'])
      .describe('duplicate: this event_id was already ingested; nothing was done again.'),
    reason: z.string().optional().describe('Why the event was rejected, naming the field.'),
    deliveries: z
      .int()
      .min(0)
      .optional()
      .describe('Deliveries created for an accepted event (0 when no webhook matches).'),
  })
  .meta({ id: 'EventResult' });

export type EventResult = z.infer<typeof eventResultSchema>;

export type EventParse = { ok: true; event: AcceptedEvent } | { ok: false; reason: string; event_id?: string };

/**
 * Missing fields read "required" rather than zod's "expected string, received undefined"; unknown
 * top-level fields read `unknown field "vendor"`.
 */
const parseError = (issue: z.core.$ZodRawIssue): string | undefined =>
  issue.code === 'invalid_type' && issue.input === undefined
    ? 'required'
    : issue.code === 'unrecognized_keys'
      ? `unknown field ${issue.keys.map((key) => JSON.stringify(key)).join(', ')}`
      : undefined;

/**
 * Validates one raw event and settles its id and time: a missing `event_id` gets `newId()`, ids
 * are lower-cased (so the same UUID in another case is the same event), a missing `timestamp` is
 * the acceptance time, and every timestamp is normalised to UTC with milliseconds. The raw `data`
 * is kept as `sentData`, untouched. Never throws.
 */
export function parseEvent(raw: unknown, defaults: { acceptedAtMs: number; newId: () => string }): EventParse {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    return { ok: false, reason: 'the event must be a JSON object' };
  const rejected = (reason: string): EventParse => {
    const givenId = (raw as { event_id?: unknown }).event_id;
    return {
      ok: false,
      reason,
      ...(typeof givenId === 'string' && isUuid(givenId) ? { event_id: givenId.toLowerCase() } : {}),
    };
  };
  // Before anything else walks the data: the only part of an event that may nest (the envelope
  // fields are scalars, and an unknown one is rejected without being read).
  const tooDeep = nestingProblem((raw as { data?: unknown }).data, 'data');
  if (tooDeep !== undefined) return rejected(tooDeep);
  // Parsed first without the custom messages: a parse given an `error` map leaves zod's compiled
  // fast path (about 8 against 3 µs for a deployment event). Only a rejected event is parsed again
  // with them, for its reason.
  const plain = ingestEventSchema.safeParse(raw);
  const result = plain.success ? plain : ingestEventSchema.safeParse(raw, { error: parseError });
  if (!result.success) return rejected(describeEventIssues(result.error));
  const parsed = result.data;
  const timestampMs = parsed.timestamp === undefined ? defaults.acceptedAtMs : Date.parse(parsed.timestamp);
  if (!Number.isFinite(timestampMs)) return { ok: false, reason: 'timestamp: is not a representable date-time' };
  // Field by field, not `{ ...parsed }`: spreading zod's output object costs about 3.6 µs an event
  // (its own properties are added one by one), this about nothing. The schemas are strict objects,
  // so these are all the fields there are.
  const event = {
    event_id: (parsed.event_id ?? defaults.newId()).toLowerCase(),
    event_type: parsed.event_type,
    timestamp: new Date(timestampMs).toISOString(),
    timestampMs,
    data: parsed.data,
    sentData: (raw as { data: unknown }).data,
  } as AcceptedEvent;
  if (parsed.vendor_id !== undefined) event.vendor_id = parsed.vendor_id;
  return { ok: true, event };
}

const IDENTIFIER_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PATH_KEY_LENGTH_MAX = 40;

/** `data.hardware_specs.gpus[0].name`; odd keys (record keys) are quoted and shortened. */
function formatPath(path: readonly PropertyKey[]): string {
  let text = '';
  for (const segment of path) {
    if (typeof segment === 'number') text += `[${segment}]`;
    else if (typeof segment === 'string' && IDENTIFIER_RE.test(segment)) text += text === '' ? segment : `.${segment}`;
    else {
      const key = String(segment);
      text += `[${JSON.stringify(key.length > PATH_KEY_LENGTH_MAX ? `${key.slice(0, PATH_KEY_LENGTH_MAX)}…` : key)}]`;
    }
  }
  return text;
}

/**
 * The issues to report: a failed union (a removal's data) reports the branch that came closest,
 * i.e. the one with the fewest issues, with its paths made absolute.
 */
function flattenIssues(
  issues: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[] = [],
): { path: PropertyKey[]; message: string; unknownField: boolean }[] {
  return issues.flatMap((issue) => {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const closest = issue.errors.reduce((best, branch) => (branch.length < best.length ? branch : best));
      return flattenIssues(closest, path);
    }
    return [{ path, message: issue.message, unknownField: issue.code === 'unrecognized_keys' }];
  });
}

/**
 * A short human reason for a failed event validation, naming the fields, e.g. `data.metadata.machine_id: required`.
 * Unknown fields come first: a misplaced or misspelt field (`vendor` for `vendor_id`) is usually
 * the cause of the other issues, and must not be the one hidden behind "(and 1 more)".
 */
function describeEventIssues(error: z.ZodError): string {
  const all = flattenIssues(error.issues);
  const issues = [...all.filter((issue) => issue.unknownField), ...all.filter((issue) => !issue.unknownField)];
  const parts = [
    ...new Set(
      issues
        .slice(0, REASON_ISSUES_MAX)
        .map(({ path, message }) => (path.length === 0 ? message : `${formatPath(path)}: ${message}`)),
    ),
  ];
  const more = issues.length - REASON_ISSUES_MAX;
  const reason = parts.join('; ') + (more > 0 ? ` (and ${more} more)` : '');
  return reason.length > REASON_LENGTH_MAX ? `${reason.slice(0, REASON_LENGTH_MAX - 1)}…` : reason;
}

/** The data of a test event (`POST /vendors/v1/webhooks/{webhook_id}/test`), sent with the webhook's own event type. */
const testEventDataSchema = z
  .strictObject({ test: z.literal(true), message: z.string() })
  .meta({ description: 'A test event sent from the API: not a real change; data is only this.' });

export type TestEventData = z.infer<typeof testEventDataSchema>;

/**
 * The JSON body a webhook of `eventType` receives, as `buildEnvelope` writes it: what the OpenAPI
 * document's webhooks section shows, and what a test checks real deliveries against. `data` is the
 * event's data exactly as the producer sent it (valid by ingest's schema, with any fields it did
 * not name), or a test event's.
 */
export function envelopeSchema(eventType: WebhookEventType) {
  return z
    .strictObject({
      version: z.literal(ENVELOPE_VERSION).describe('Version of the envelope format.'),
      event_id: z
        .string()
        .regex(LOWER_CASE_UUID_RE)
        .describe(
          'The event id (lower-case UUID), also sent as webhook-id: the same on every attempt and replay, so receivers deduplicate on it.',
        ),
      event_type: z.literal(eventType),
      timestamp: z.iso.datetime().describe('When the event happened: ISO 8601 in UTC with milliseconds.'),
      data: z.union([WEBHOOK_EVENTS[eventType].data, testEventDataSchema]),
    })
    .meta({ description: WEBHOOK_EVENTS[eventType].description });
}

/** What `buildEnvelope` needs of an event. */
export interface EnvelopeSource {
  event_id: string;
  event_type: WebhookEventType;
  /** Any ISO 8601 date-time; it is normalised to UTC with milliseconds. */
  timestamp: string;
  data: unknown;
}

/**
 * The exact JSON body a vendor receives (docs/receiving-webhooks.md "What a vendor receives"):
 * `{"version":"1.0","event_id":…,"event_type":…,"timestamp":…,"data":…}`, in this key order.
 */
export function buildEnvelope(event: EnvelopeSource): string {
  return JSON.stringify(envelopeOf(event));
}

/** The body a vendor receives as an object (what payload filters are evaluated on). */
export function envelopeOf(event: EnvelopeSource): HooklineEnvelope<WebhookEventType, unknown> {
  const timestampMs = Date.parse(event.timestamp);
  if (!Number.isFinite(timestampMs)) throw new RangeError(`envelope timestamp is not a date-time: ${event.timestamp}`);
  // Typed as the envelope @hookline/verify publishes, so a field added, dropped or renamed here
  // fails to compile until the package's type says the same.
  const envelope: HooklineEnvelope<WebhookEventType, unknown> = {
    version: ENVELOPE_VERSION,
    event_id: event.event_id,
    event_type: event.event_type,
    timestamp: new Date(timestampMs).toISOString(),
    data: event.data,
  };
  return envelope;
}
