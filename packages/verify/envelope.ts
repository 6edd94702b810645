/**
 * The JSON body of every request Hookline sends to a webhook (README "What a vendor receives"):
 * `{"version":"1.0","event_id":…,"event_type":…,"timestamp":…,"data":…}`, in this key order.
 */
import type { WebhookEventData, WebhookEventType } from '../wire/events.js';

/** The envelope around any `data`; `WebhookEnvelope` and `TestEventEnvelope` are the ones Hookline sends. */
export interface HooklineEnvelope<T extends WebhookEventType = WebhookEventType, D = unknown> {
  version: '1.0';
  /** The event's id (a UUID), equal to the `webhook-id` header: the same on every retry and replay, so receivers can deduplicate on it. */
  event_id: string;
  event_type: T;
  /** When the event happened: ISO 8601 in UTC with milliseconds, e.g. `2024-05-01T12:00:00.000Z`. */
  timestamp: string;
  data: D;
}

/** An event's delivery; `event_type` tells which data it carries. */
export type WebhookEnvelope<T extends WebhookEventType = WebhookEventType> = {
  [K in T]: HooklineEnvelope<K, WebhookEventData[K]>;
}[T];

/** What a test event (`POST /vendors/v1/webhooks/{id}/test`) carries instead of an event's data. */
export interface TestEventData {
  test: true;
  message: string;
}

/** A test event: the webhook's own event type, `data.test` true. */
export type TestEventEnvelope = HooklineEnvelope<WebhookEventType, TestEventData>;

/** Any body Hookline sends to a webhook: an event, or a test event its vendor asked for. */
export type WebhookDelivery = WebhookEnvelope | TestEventEnvelope;

/** True for a test event, whose data is not the event type's: check this before narrowing on `event_type`. */
export function isTestEvent(delivery: WebhookDelivery): delivery is TestEventEnvelope {
  const data: unknown = delivery.data;
  return typeof data === 'object' && data !== null && (data as { test?: unknown }).test === true;
}
