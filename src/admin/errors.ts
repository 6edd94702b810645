import { isUuid } from '../domain/ids.js';
/** Every error the admin API answers with, by stable code. The body is `{ error, code }`. */
export const ERRORS = {
  unauthorized: { status: 401, message: 'Missing or invalid API key' },
  forbidden: { status: 403, message: 'This API key does not have the required role' },
  no_vendor: { status: 403, message: 'This API key is not bound to a vendor' },
  invalid_request: { status: 400, message: 'Invalid request' },
  invalid_json: { status: 400, message: 'The request body is not valid JSON' },
  unsupported_media_type: { status: 415, message: 'The request body must be application/json' },
  body_too_large: { status: 413, message: 'The request body is too large' },
  events_rejected: { status: 400, message: 'Every event of the request was rejected; see results' },
  invalid_task_id: { status: 400, message: 'Invalid task_id format' },
  task_not_found: { status: 404, message: 'Task not found' },
  event_log_disabled: {
    status: 409,
    message: 'This installation keeps no event log (HOOKLINE_EVENT_LOG=false): no event feed or range replays',
  },
  task_finished: { status: 409, message: 'This task has ended already; there is nothing to cancel' },
  invalid_deployment_id: { status: 400, message: 'Invalid deployment_id format' },
  deployment_not_found: { status: 404, message: 'Deployment not found' },
  invalid_webhook_id: { status: 400, message: 'Invalid webhook_id format' },
  webhook_not_found: { status: 404, message: 'Webhook not found' },
  webhook_conflict: { status: 409, message: 'A webhook for this event_type is already registered' },
  credentials_not_restated: {
    status: 409,
    message:
      'callback_url moves to another origin, where the webhook’s stored credentials would go: send them again in the same request, or null to drop them',
  },
  webhook_not_ed25519: { status: 409, message: 'This webhook signs with hmac only; PATCH signature to ed25519 first' },
  invalid_delivery_id: { status: 400, message: 'Invalid delivery_id format' },
  delivery_not_found: { status: 404, message: 'Delivery not found' },
  not_dead_letter: { status: 409, message: 'This delivery is not a dead letter (already replayed or never dead)' },
  invalid_filter: { status: 400, message: 'Invalid filter' },
  machine_not_found: { status: 404, message: 'Machine not found' },
  route_not_found: { status: 404, message: 'Route not found' },
  method_not_allowed: { status: 405, message: 'Method not allowed' },
  csrf_failed: {
    status: 403,
    message: 'A portal session’s request must come from the portal and carry its X-CSRF-Token header',
  },
  portal_permission: { status: 403, message: 'This portal session’s permission does not allow this' },
  portal_token_invalid: {
    status: 401,
    message: 'This portal link is invalid, was already used, has expired or was revoked; ask for a new link',
  },
  public_url_required: {
    status: 409,
    message:
      'Portal links need HOOKLINE_PUBLIC_URL, the https address where browsers reach this API, unless the API is reached on loopback (the portal’s session cookie is Secure: browsers keep it over https and on localhost only); ask the operator to set it',
  },
  invalid_session_id: { status: 400, message: 'Invalid session_id format' },
  portal_session_not_found: { status: 404, message: 'Portal session not found (revoked, expired or never issued)' },
  rate_limited: { status: 429, message: 'Too many requests for this API key' },
  replay_queue_full: {
    status: 429,
    message:
      'This vendor has as many range replays waiting or running as it may (HOOKLINE_REPLAY_QUEUED_MAX); wait for one to end, or cancel one',
  },
  replay_count_limited: {
    status: 429,
    message:
      'This vendor’s range counts read as many events this second as they may (HOOKLINE_REPLAY_COUNT_BUDGET_PER_SECOND); retry after 1 s',
  },
  storage_unavailable: { status: 503, message: 'Storage is unreachable; try again shortly' },
  internal: { status: 500, message: 'Internal server error' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERRORS;

/** Thrown by handlers and hooks; the error handler turns it into `{ error, code }`. */
export class ApiError extends Error {
  readonly statusCode: number;

  constructor(
    readonly code: ErrorCode,
    message: string = ERRORS[code].message,
    /** Fields the body carries beside `error` and `code` (a 409's existing `webhook_id`). */
    readonly details: { webhook_id?: string } = {},
    /** A 429's Retry-After, in seconds (default 1: the request limits refill each second). */
    readonly retryAfterS = 1,
  ) {
    super(message);
    this.name = 'ApiError';
    this.statusCode = ERRORS[code].status;
  }
}

export interface ErrorBody {
  error: string;
  code: ErrorCode;
  webhook_id?: string;
}

export function errorBody(code: ErrorCode, message: string = ERRORS[code].message): ErrorBody {
  return { error: message, code };
}

/** A path id that must be a UUID, lower-cased; else 400 with `code`. One check for every route. */
export function checkedUuid(
  text: string,
  code: 'invalid_webhook_id' | 'invalid_delivery_id' | 'invalid_task_id',
): string {
  if (!isUuid(text)) throw new ApiError(code);
  return text.toLowerCase();
}

/** A Unix-ms time as the API writes times (ISO 8601), or null. */
export const isoOrNull = (ms: number | undefined): string | null =>
  ms === undefined ? null : new Date(ms).toISOString();
