import { buildEnvelope, type TestEventData } from '../domain/event.js';
import { newId } from '../domain/ids.js';
import type { Webhook } from '../domain/webhook.js';
import type { DeliverJob } from '../domain/delivery.js';
import type { DeliveryHistory } from '../store/delivery-log.js';
import type { DeliveryQueues } from '../delivery/queue.js';

/** Sends a webhook a test event of its own type, signed and retried like any other delivery. */
export class TestEventSender {
  constructor(
    private readonly deps: {
      queues: Pick<DeliveryQueues, 'add'>;
      log: Pick<DeliveryHistory, 'recordQueued'>;
      nowMs: () => number;
    },
  ) {}

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
    // As a replay: queued, then recorded unless its first attempt was, so its id answers at once.
    await this.deps.queues.add([job]);
    await this.deps.log.recordQueued([job]);
    return { deliveryId: job.deliveryId, eventId };
  }
}
