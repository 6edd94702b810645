import { describe, expect, it } from 'vitest';
import { operationalWebhookJob } from '../../src/delivery/operational.js';
import type { Webhook } from '../../src/domain/webhook.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const webhook: Webhook = webhookFixture({
  id: '6c0e1d9a-4f1b-4d2e-9a3b-5c6d7e8f9a0b',
  vendorId: 'vendor-1',
  callbackUrl: 'https://hooks.vendor.example/in',
  secret: 'whsec_dGhlLXZlbmRvci1zZWNyZXQtMTYrYnl0ZXM=',
  previousSecret: { secret: 'the-previous-secret', untilMs: 9e15 },
  disabled: { reason: 'gone', atMs: 1_763_726_400_000 },
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
});

describe('operationalWebhookJob', () => {
  it('builds webhook.disabled: type, timestamp, data, and never a secret', () => {
    const job = operationalWebhookJob({ kind: 'disabled', webhook, reason: 'gone', atMs: 1_763_726_400_000 });
    expect(job).toMatchObject({ type: 'webhook.disabled', webhookId: webhook.id, vendorId: 'vendor-1' });
    expect(job.body).toBe(
      '{"type":"webhook.disabled","timestamp":"2025-11-21T12:00:00.000Z","data":{"webhook_id":"6c0e1d9a-4f1b-4d2e-9a3b-5c6d7e8f9a0b",' +
        '"vendor_id":"vendor-1","event_type":"EVENT_TYPE_MACHINE_CREATED","callback_url":"https://hooks.vendor.example/in","reason":"gone",' +
        '"disabled_at":"2025-11-21T12:00:00.000Z"}}',
    );
    expect(job.body).not.toContain('secret');
  });

  it('builds webhook.recovered with when the webhook was disabled and when it recovered', () => {
    const job = operationalWebhookJob({
      kind: 'recovered',
      webhook,
      reason: 'failing',
      disabledAtMs: 1_763_726_400_000,
      atMs: 1_763_730_000_000,
    });
    expect(JSON.parse(job.body)).toEqual({
      type: 'webhook.recovered',
      timestamp: '2025-11-21T13:00:00.000Z',
      data: {
        webhook_id: webhook.id,
        vendor_id: 'vendor-1',
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: 'https://hooks.vendor.example/in',
        reason: 'failing',
        disabled_at: '2025-11-21T12:00:00.000Z',
        recovered_at: '2025-11-21T13:00:00.000Z',
      },
    });
    // A new message id per transition: the receiver's deduplication key.
    expect(job.id).not.toBe(
      operationalWebhookJob({ kind: 'recovered', webhook, reason: 'failing', disabledAtMs: 0, atMs: 0 }).id,
    );
  });
});
