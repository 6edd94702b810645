/** The six event types a vendor can subscribe a webhook to (interface section 6). */
export const WEBHOOK_EVENT_TYPES = [
  'EVENT_TYPE_MACHINE_CREATED',
  'EVENT_TYPE_MACHINE_UPDATED',
  'EVENT_TYPE_MACHINE_REMOVED',
  'EVENT_TYPE_DEPLOYMENT_CREATED',
  'EVENT_TYPE_DEPLOYMENT_UPDATED',
  'EVENT_TYPE_DEPLOYMENT_STOPPED',
] as const;

export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];
