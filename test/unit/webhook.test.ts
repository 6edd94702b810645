import { describe, expect, it } from 'vitest';
import { signingSecrets, toWebhookResource, type Webhook } from '../../src/domain/webhook.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const NOW = Date.UTC(2025, 0, 2, 3, 4, 5);

const webhook = (over: Partial<Webhook> = {}): Webhook =>
  webhookFixture({
    id: '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f',
    callbackUrl: 'https://example.com/h',
    secret: 'new-secret',
    updatedAt: '2025-01-02T00:00:00.000Z',
    ...over,
  });

describe('signingSecrets', () => {
  it('is the current secret, then the previous one while its overlap lasts', () => {
    const rotating = webhook({ previousSecret: { secret: 'old-secret', untilMs: NOW + 1 } });
    expect(signingSecrets(rotating, NOW)).toEqual(['new-secret', 'old-secret']);
    expect(signingSecrets(rotating, NOW + 1)).toEqual(['new-secret']);
    expect(signingSecrets(webhook({ secret: undefined }), NOW)).toEqual([]);
  });
});

describe('toWebhookResource', () => {
  it('names when the previous secret stops signing, only during the overlap', () => {
    const rotating = webhook({ previousSecret: { secret: 'old-secret', untilMs: NOW + 60_000 } });
    expect(toWebhookResource(rotating, NOW)).toEqual({
      webhook_id: rotating.id,
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      callback_url: 'https://example.com/h',
      secret: 'new-secret',
      has_secret: true,
      previous_secret_expires_at: '2025-01-02T03:05:05.000Z',
      enabled: true,
      rate_limit_per_second: null,
      signature: 'hmac',
      filter: null,
      ordering: 'none',
      ordering_key: null,
      max_concurrency: null,
      retention: null,
      retry: null,
      include_fields: null,
      priority: 'normal',
      propagate_trace: false,
      headers: {},
      auth: null,
      tls_client_certificate: null,
      created_at: '2025-01-01T00:00:00.000Z',
      updated_at: '2025-01-02T00:00:00.000Z',
    });
    expect(toWebhookResource(rotating, NOW + 60_000)).not.toHaveProperty('previous_secret_expires_at');
    expect(toWebhookResource(webhook(), NOW)).not.toHaveProperty('previous_secret_expires_at');
  });

  it('says whether a secret signs, without the secret where it is not shown', () => {
    expect(toWebhookResource(webhook({ secret: undefined }), NOW)).toMatchObject({ has_secret: false });
    expect(toWebhookResource(webhook({ secret: undefined }), NOW)).not.toHaveProperty('secret');
  });

  it('shows the rate limit, null when unlimited', () => {
    expect(toWebhookResource(webhook({ rateLimitPerSecond: 25 }), NOW).rate_limit_per_second).toBe(25);
    expect(toWebhookResource(webhook(), NOW).rate_limit_per_second).toBeNull();
  });

  it('never shows the previous secret itself', () => {
    const rotating = webhook({ previousSecret: { secret: 'old-secret', untilMs: NOW + 60_000 } });
    expect(JSON.stringify(toWebhookResource(rotating, NOW))).not.toContain('old-secret');
  });
});
