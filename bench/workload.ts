import { randomUUID } from 'node:crypto';
import { buildEnvelope, parseEvent, type WebhookEvent } from '../src/domain/event.js';
import type { WebhookEventType } from '../src/domain/events.js';

/** The event type every bench event has; each vendor has one webhook for it. */
export const BENCH_EVENT_TYPE: WebhookEventType = 'EVENT_TYPE_DEPLOYMENT_UPDATED';

export const vendorId = (index: number) => `bench-vendor-${String(index).padStart(4, '0')}`;

/** One producer event: a deployment status update of the vendor's deployment, padded to the payload size. */
export interface BenchEvent {
  event_id: string;
  event_type: WebhookEventType;
  vendor_id: string;
  data: { deployment_id: string; machine_id: string; status: 'STATUS_RUNNING'; fail_reason: string; metadata: Record<string, string> };
}

/**
 * Builds events whose envelope (the body a receiver gets) is `payloadBytes` long, give or take a
 * byte: every id is fixed-width, so one padding length fits all. Each vendor has `deploymentsPerVendor`
 * deployments, so the read model stays small and the figures are about deliveries.
 */
export class EventFactory {
  private readonly padding: Record<string, string>;
  /** The exact envelope length of every event this factory makes. */
  readonly envelopeBytes: number;

  constructor(
    payloadBytes: number,
    private readonly deploymentsPerVendor = 1,
  ) {
    const bare = this.envelopeOf(this.make(0, 0, {}));
    // Metadata values hold at most 4096 characters; "pN":"…", adds 8 characters per chunk.
    let room = payloadBytes - bare.length;
    const padding: Record<string, string> = {};
    for (let i = 0; room > 8 && i < 60; i += 1) {
      const length = Math.min(4_000, room - 8 - String(i).length);
      padding[`p${i}`] = 'x'.repeat(Math.max(0, length));
      room -= length + 8 + String(i).length;
    }
    this.padding = padding;
    this.envelopeBytes = Buffer.byteLength(this.envelopeOf(this.make(0, 0, this.padding)));
  }

  /** Event number `n` for the vendor at `vendorIndex`. */
  event(vendorIndex: number, n: number): BenchEvent {
    return this.make(vendorIndex, n, this.padding);
  }

  /** The body Hookline builds for an event (the baselines send a copy of one). */
  envelopeOf(event: BenchEvent): string {
    const parsed = parseEvent(event, { acceptedAtMs: Date.UTC(2026, 0, 1), newId: randomUUID });
    if (!parsed.ok) throw new Error(`bench event rejected: ${parsed.reason}`);
    return buildEnvelope(parsed.event as WebhookEvent);
  }

  private make(vendorIndex: number, n: number, padding: Record<string, string>): BenchEvent {
    const deployment = `${String(vendorIndex).padStart(4, '0')}-${String(n % this.deploymentsPerVendor).padStart(6, '0')}`;
    return {
      event_id: randomUUID(),
      event_type: BENCH_EVENT_TYPE,
      vendor_id: vendorId(vendorIndex),
      data: {
        deployment_id: `dep-${deployment}`,
        machine_id: `m-${deployment}`,
        status: 'STATUS_RUNNING',
        fail_reason: '',
        metadata: { region: 'eu-central', image: 'ghcr.io/example/inference:1.4.2', ...padding },
      },
    };
  }
}

/** `count` events spread round-robin over `vendors` vendors, starting at event number `first`. */
export function eventsFor(factory: EventFactory, count: number, vendors: number, first = 0, vendorOf = (n: number) => n % vendors): BenchEvent[] {
  return Array.from({ length: count }, (_, i) => factory.event(vendorOf(first + i), first + i));
}

/** Request bodies of `{ events: [...] }`, `batchSize` events each, built before any timing starts. */
export function batchBodies(events: readonly BenchEvent[], batchSize: number): { body: string; count: number }[] {
  const bodies: { body: string; count: number }[] = [];
  for (let i = 0; i < events.length; i += batchSize) {
    const batch = events.slice(i, i + batchSize);
    bodies.push({ body: JSON.stringify({ events: batch }), count: batch.length });
  }
  return bodies;
}

/** Runs `work(item)` over `items` with `parallel` workers; each item once, in order of start. */
export async function runParallel<T>(items: readonly T[], parallel: number, work: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      await work(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(parallel, items.length)) }, worker));
}
