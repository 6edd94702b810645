import type { TestEventData } from '@hookline/verify';
import { buildEnvelope } from '../domain/event.js';
import { newId } from '../domain/ids.js';
import type { Webhook } from '../domain/webhook.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { DeliveryQueues } from './queue.js';

/** Sends a webhook a test event of its own type, signed and retried like any other delivery. */
export class TestEventSender {
  constructor(private readonly deps: { queues: Pick<DeliveryQueues, 'add'>; nowMs: () => number }) {}

  async send(webhook: Webhook): Promise<{ deliveryId: string; eventId: string }> {
    const nowMs = this.deps.nowMs();
    const eventId = newId();
    const job: DeliverJob = {
      deliveryId: newId(),
      eventId,
      eventType: webhook.eventType,
      vendorId: webhook.vendorId,
      webhookId: webhook.id,
      body: buildEnvelope({
        event_id: eventId,
        event_type: webhook.eventType,
        timestamp: new Date(nowMs).toISOString(),
        data: { test: true, message: 'A test event sent from the Hookline API.' } satisfies TestEventData,
      }),
      acceptedAtMs: nowMs,
      manual: true,
    };
    await this.deps.queues.add([job]);
    return { deliveryId: job.deliveryId, eventId };
  }
}
