import { z } from 'zod';
import type { WebhookEventType } from '../domain/events.js';
import { LOWER_CASE_UUID_RE } from '../domain/ids.js';
import { READINGS, type AnswerAction } from './interpret.js';

/**
 * What a callback URL receives besides the envelope (`envelopeSchema`), and how its answers are
 * read: the OpenAPI document's webhooks section is generated from these, and tests hold them to
 * the real sender (`signatureHeaders`, the attempt's request) and to `decide`.
 */

/**
 * The request headers of a delivery of `eventType`, lower case as sent. Besides these, only
 * `content-type: application/json` and the connection's own headers (host, content-length).
 */
export function deliveryHeadersSchema(eventType: WebhookEventType) {
  return z.object({
    'user-agent': z
      .string()
      .regex(/^Hookline\/\S+$/)
      .describe('Hookline/<version> of the engine that sent the attempt.'),
    'webhook-id': z
      .string()
      .regex(LOWER_CASE_UUID_RE)
      .describe(
        'Standard Webhooks: the event id (event_id in the body), the same on every attempt and replay; signed.',
      ),
    'webhook-timestamp': z
      .string()
      .regex(/^\d+$/)
      .describe(
        'Standard Webhooks: Unix seconds of this attempt; signed. Refuse timestamps far from your clock (replays).',
      ),
    'webhook-signature': z
      .string()
      .regex(/^v1,[A-Za-z0-9+/]{43}=( v1,[A-Za-z0-9+/]{43}=)*$/)
      .optional()
      .describe(
        'Standard Webhooks, when the webhook has a secret: `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`. ' +
          'The key is the base64-decoded rest of a `whsec_` secret, else the secret’s UTF-8 bytes. During a secret rotation one ' +
          'entry per secret, space-separated: accept the request when any of them matches.',
      ),
    'x-webhook-signature': z
      .string()
      .regex(/^sha256=[0-9a-f]{64}$/)
      .optional()
      .describe(
        'The platform’s legacy scheme, when the webhook has a secret: `sha256=<hex HMAC-SHA256 of the body>` keyed by the secret’s ' +
          'UTF-8 bytes. During a rotation it is signed with the previous secret until the overlap ends.',
      ),
    'x-webhook-event': z.literal(eventType).describe('The event type (event_type in the body).'),
    'x-webhook-attempt': z
      .string()
      .regex(/^[1-9]\d*$/)
      .describe('Which attempt of this delivery this is, from 1.'),
  });
}

/** One answer of the OpenAPI webhooks section: what `decide` does with it, from the rows of `READINGS` it covers. */
export interface ReceiverAnswer {
  /** An OpenAPI response key: a status, a range such as `2XX`, or `default`. */
  status: string;
  action: AnswerAction;
  /** Whether a Retry-After header on this answer sets the delay of the next attempt. */
  honoursRetryAfter: boolean;
  description: string;
}

/** The answers the webhooks section names on their own; every other row of the table is its `default`. */
const NAMED_ANSWERS = ['2XX', '410', '429', '503'];

const RETRIES =
  'Retries follow the schedule (0 s, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h by default, ±20 % jitter); the delivery is ' +
  'dead-lettered after the last attempt. Failures of an endpoint open its circuit (docs/delivery-semantics.md, Isolation).';

/** How the engine reads a receiver's answers (the table in interpret.ts), most specific first. */
export const RECEIVER_ANSWERS: readonly ReceiverAnswer[] = [
  ...NAMED_ANSWERS.map((status) => {
    const reading = READINGS.find((r) => r.answer === status)!;
    const description = reading.action === 'retry' ? `${reading.description} ${RETRIES}` : reading.description;
    return { status, action: reading.action, honoursRetryAfter: reading.honoursRetryAfter, description };
  }),
  {
    status: 'default',
    action: 'retry',
    honoursRetryAfter: false,
    description: [
      ...READINGS.filter((r) => !NAMED_ANSWERS.includes(r.answer) && r.answer !== 'circuit_open').map(
        (r) => `${r.answer}: ${r.description}`,
      ),
      RETRIES,
    ].join(' '),
  },
];
