import type { Webhook } from '../../src/domain/webhook.js';

/** A plain enabled webhook for unit tests of delivery rules, with `over` applied. */
export function webhookFixture(over: Partial<Webhook> = {}): Webhook {
  return {
    id: 'wh-1',
    vendorId: 'v-1',
    eventType: 'EVENT_TYPE_MACHINE_CREATED',
    callbackUrl: 'https://receiver.example/hook',
    secret: undefined,
    previousSecret: undefined,
    disabled: undefined,
    rateLimitPerSecond: undefined,
    signature: 'hmac',
    signingKeys: [],
    filter: undefined,
    ordering: 'none',
    orderingKey: undefined,
    maxConcurrency: undefined,
    retentionMs: undefined,
    retry: undefined,
    includeFields: undefined,
    priority: 'normal',
    propagateTrace: false,
    headers: [],
    auth: undefined,
    clientCertificate: undefined,
    createdAt: '2025-01-01T00:00:00.000Z',
    updatedAt: '2025-01-01T00:00:00.000Z',
    ...over,
  };
}
