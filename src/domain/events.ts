/**
 * The six event types a vendor can subscribe a webhook to (interface section 6). The list is the one
 * the client packages publish, so the engine and its receivers cannot disagree on it.
 */
export { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '@hookline/verify';
