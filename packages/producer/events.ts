/** The events a producer posts to `POST /internal/v1/events`, and the answer for each. */
import type { WebhookEventData, WebhookEventType } from '../wire/events.js';

/** An event delivered to the webhooks of `vendor_id` that subscribe to its `event_type`. */
export type WebhookEventInput<T extends WebhookEventType = WebhookEventType> = {
  [K in T]: {
    /** A UUID; the idempotency key (re-sending the same id is a no-op for at least 24 h). `HooklineProducer` assigns one when absent. */
    event_id?: string;
    event_type: K;
    /** The vendor the event concerns. */
    vendor_id: string;
    /** When it happened, ISO 8601 with `Z` or an offset; default the time Hookline accepts it. An older event never overwrites newer state. */
    timestamp?: string;
    /** Delivered to the vendor exactly as sent. */
    data: WebhookEventData[K];
  };
}[T];

export type TaskStatus = 'pending' | 'in_progress' | 'success' | 'failed';

/** An asynchronous task of the platform, as `GET /rental/v1/tasks/{task_id}` shows it. */
export interface Task {
  /** A UUID. */
  task_id: string;
  /** `success` and `failed` are terminal. */
  status: TaskStatus;
  /** Why the task failed; null unless it failed. */
  fail_reason: string | null;
  /**
   * Items done out of total, for long operations. A bulk replay also counts its replays: queued,
   * delivered, failed (again) and pending (still without an outcome), and says when it was cancelled.
   */
  progress?: {
    total: number;
    done: number;
    queued?: number | undefined;
    delivered?: number | undefined;
    failed?: number | undefined;
    pending?: number | undefined;
    /** Set once a bulk replay was cancelled. */
    cancelled?: true | undefined;
  };
}

/** A task changed status: updates the task lookup and is never delivered to webhooks. */
export interface TaskUpdatedEvent {
  event_id?: string;
  event_type: 'TASK_UPDATED';
  vendor_id?: string;
  timestamp?: string;
  data: Task;
}

/** An event as a producer writes it. */
export type ProducerEvent = WebhookEventInput | TaskUpdatedEvent;

/** The outcome of one event of a batch, in the order posted. */
export interface EventResult {
  /** The event's id (assigned when it had none); absent for a rejected event without a valid one. */
  event_id?: string | undefined;
  /** `duplicate`: this event_id was already ingested, and nothing was done again. */
  status: 'accepted' | 'duplicate' | 'rejected';
  /** Why the event was rejected, naming the field. */
  reason?: string | undefined;
  /** Deliveries created for an accepted event (0 when no webhook matches). */
  deliveries?: number | undefined;
}
