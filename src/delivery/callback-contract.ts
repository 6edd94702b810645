import { z } from 'zod';
import type { WebhookEventType } from '../domain/events.js';
import { LOWER_CASE_UUID_RE } from '../domain/ids.js';
import type { Decision } from './classify.js';

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
      .describe('Standard Webhooks: the event id (event_id in the body), the same on every attempt and replay; signed.'),
    'webhook-timestamp': z
      .string()
      .regex(/^\d+$/)
      .describe('Standard Webhooks: Unix seconds of this attempt; signed. Refuse timestamps far from your clock (replays).'),
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

/** One way the engine reads a receiver's answer: what `decide` does with it. */
export interface ReceiverAnswer {
  /** An OpenAPI response key: a status, a range such as `2XX`, or `default`. */
  status: string;
  action: Decision['action'];
  /** Whether a Retry-After header on this answer sets the delay of the next attempt. */
  honoursRetryAfter: boolean;
  description: string;
}

/** How the engine reads a receiver's answers (see `decide` in classify.ts), most specific first. */
export const RECEIVER_ANSWERS: readonly ReceiverAnswer[] = [
  {
    status: '2XX',
    action: 'delivered',
    honoursRetryAfter: false,
    description: 'Delivered: any 2xx within the attempt timeout (15 s by default). The body is ignored; its first 4 KiB are kept in the attempt log.',
  },
  {
    status: '410',
    action: 'disable',
    honoursRetryAfter: false,
    description: 'Gone: the webhook is disabled at once (disabled_reason gone) and this delivery is not retried. PATCH enabled=true turns it back on.',
  },
  {
    status: '429',
    action: 'retry',
    honoursRetryAfter: true,
    description:
      'Too many requests: retried after Retry-After (seconds or an HTTP date; at most 24 h, and never past the last scheduled attempt), ' +
      'else on the retry schedule. Dead-lettered after the last attempt.',
  },
  {
    status: '503',
    action: 'retry',
    honoursRetryAfter: true,
    description:
      'Unavailable: retried after Retry-After (seconds or an HTTP date; at most 24 h, and never past the last scheduled attempt), ' +
      'else on the retry schedule. Dead-lettered after the last attempt.',
  },
  {
    status: 'default',
    action: 'retry',
    honoursRetryAfter: false,
    description:
      'Any other status, 3xx included (redirects are not followed), and no answer within the timeout: retried on the schedule ' +
      '(0 s, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h by default, ±20 % jitter); dead-lettered after the last attempt.',
  },
];
