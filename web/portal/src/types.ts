/** The shapes the portal reads from the API (see /openapi.json); only the fields it uses. */

import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../../packages/wire/events.js';

/** The six event types, from the one list the engine and the client packages share. */
export const EVENT_TYPES = WEBHOOK_EVENT_TYPES;
export type EventType = WebhookEventType;

export type Permission = 'read' | 'replay' | 'manage';

export interface Session {
  session_id: string;
  vendor_id: string;
  permission: Permission;
  expires_at: string;
  csrf_token: string;
}

export type DisabledReason = 'gone' | 'failing' | 'paused';

export type Priority = 'high' | 'normal';

export interface Webhook {
  webhook_id: string;
  event_type: EventType;
  callback_url: string;
  /** Absent for sessions below manage, and for a webhook without a secret. */
  secret?: string;
  /** Whether a secret signs its deliveries (HMAC), also where the secret itself is not shown. */
  has_secret: boolean;
  previous_secret_expires_at?: string;
  enabled: boolean;
  disabled_reason?: DisabledReason;
  /** Sends in any one second at most, over all workers; null: unlimited. */
  rate_limit_per_second: number | null;
  /** ed25519: deliveries also carry a v1a signature by the webhook's own key pair. */
  signature: 'hmac' | 'ed25519';
  /** fifo: one delivery at a time, in the order the events were accepted. */
  ordering: 'fifo' | 'none';
  /** With fifo: the path whose value splits the deliveries into lines kept in order each; null: one line. */
  ordering_key: string | null;
  /** Requests in flight at most, per worker; null: the worker's send slots. */
  max_concurrency: number | null;
  /** The payload filter (docs/receiving-webhooks.md, "Payload filters"); null: every event of the type. */
  filter: Record<string, unknown> | null;
  /** Custom request headers, each value masked (••••); {} when there are none. */
  headers: Record<string, string>;
  /** The receiver authentication, without its secret; null: none. */
  auth: ReceiverAuth | null;
  /** The TLS client certificate, described (never its key); null: none. */
  tls_client_certificate: ClientCertificate | null;
  /** How long its events and delivery records are kept (`24h`, `3d`); null: the installation's retention. */
  retention: string | null;
  /** Its own retry delays and max age (engines from the version that has them; absent before); null: the installation's schedule. */
  retry?: { schedule: string[] | null; max_age: string | null } | null;
  /** The paths of data its deliveries carry, with the identifiers (absent before the version that has them); null: every field. */
  include_fields?: string[] | null;
  /** high: its deliveries go first where the endpoint holds deliveries back (absent before the version that has it). */
  priority?: Priority;
  /** Each request carries a W3C traceparent (engines from the version that traces; absent before). */
  propagate_trace?: boolean;
  created_at: string;
  updated_at: string;
}

export type AuthType = 'basic' | 'bearer' | 'oauth2_client_credentials';
export type TokenAuthMethod = 'client_secret_basic' | 'client_secret_post';

/** How deliveries authenticate to the receiver, as reads show it: the type and non-secret fields. */
export interface ReceiverAuth {
  type: AuthType;
  /** basic */
  username?: string;
  /** oauth2_client_credentials: where a token is fetched, as whom, and how the client authenticates there. */
  token_url?: string;
  client_id?: string;
  scope?: string;
  audience?: string;
  token_auth_method?: TokenAuthMethod;
}

export interface ClientCertificate {
  subject: string;
  issuer: string;
  /** Colon-separated hex. */
  fingerprint_sha256: string;
  not_after: string;
}

interface StatsWindow {
  attempts: number;
  delivered: number;
  failed: number;
  success_rate: number | null;
  p50_ms: number | null;
  p95_ms: number | null;
}

export interface WebhookStats {
  webhook_id: string;
  circuit: 'closed' | 'open' | 'half_open';
  last_attempt: null | { attempted_at: string; outcome: string; status_code: number | null; duration_ms: number };
  windows: { hour: StatsWindow; day: StatsWindow };
  rate_limit_per_second: number | null;
  /** Attempts sent in the last full minute ÷ 60. */
  send_rate_per_second: number;
  /** The endpoint's adaptive concurrency, summed over the workers sending to it. */
  concurrency?: { limit: number | null; in_flight: number; workers: number; paused_until: string | null };
  /** A FIFO webhook's line: deliveries waiting, and how long the oldest has waited. */
  fifo_line?: { length: number; oldest_waiting_ms: number | null } | null;
  minutes: { minute: string; delivered: number; failed: number }[];
}

export const DELIVERY_STATUSES = ['pending', 'retrying', 'delivered', 'dead', 'dropped', 'replayed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export interface Delivery {
  delivery_id: string;
  event_id: string;
  event_type: string;
  status: DeliveryStatus;
  attempts: number;
  last_outcome: string | null;
  last_status_code: number | null;
  created_at: string;
  updated_at: string;
  next_attempt_at: string | null;
  replay_of: string | null;
  /** The machine the event concerns, read from its body while that is kept. */
  machine_id: string | null;
  /** The deployment a deployment event concerns. */
  deployment_id: string | null;
}

export interface Attempt {
  attempt: number;
  attempted_at: string;
  outcome: string;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  response_snippet: string | null;
  /** The headers sent, signature values masked (engines from the version that records them). */
  request_headers?: Record<string, string> | null;
  /** The trace the attempt belongs to (W3C trace id); null or absent: none. */
  trace_id?: string | null;
}

export interface DeliveryPage {
  deliveries: Delivery[];
  next_cursor: string | null;
}

/** One event of a webhook's event feed (GET …/events), with its delivery's status and the body it was sent. */
export interface LoggedEvent {
  cursor: string;
  event_id: string;
  event_type: string;
  delivery_id: string;
  accepted_at: string;
  status: DeliveryStatus;
  payload: Record<string, unknown>;
}

export interface EventPage {
  events: LoggedEvent[];
  /** Where the next page starts (also once has_more is false: newer events come after it); null: none kept yet. */
  next_cursor: string | null;
  has_more: boolean;
}

export interface Task {
  task_id: string;
  status: 'pending' | 'in_progress' | 'success' | 'failed';
  fail_reason: string | null;
  progress?: {
    total: number;
    done: number;
    queued?: number;
    delivered?: number;
    failed?: number;
    pending?: number;
    /** Set once the replay was cancelled. */
    cancelled?: true;
  };
}

export interface CatalogueEntry {
  event_type: EventType;
  description: string;
  schema: unknown;
  sample: unknown;
}

export interface PublicKey {
  kid: string;
  /** whpk_ and the 32 raw bytes in base64. */
  public_key: string;
  created_at: string;
  /** When a replaced key stops signing; null for the current key. */
  expires_at: string | null;
}

/** One node of a filter dry run (POST …/filter-test). */
export interface FilterExplanation {
  matched: boolean;
  test: string;
  found_kind?: 'value' | 'missing' | 'object' | 'list';
  found?: string | number | boolean | null;
  parts?: FilterExplanation[];
}
