/**
 * The client packages' hand-written types against what the engine accepts and sends, so the two
 * cannot drift apart: the type assertions below are checked by `npm run typecheck` (a line that
 * stops compiling names the type that drifted), and the tests run every field the types name through
 * the real parser and the real envelope builders.
 */
import type { EventResult as PublishedEventResult, ProducerEvent } from '@hookline/producer';
import {
  isTestEvent,
  WEBHOOK_EVENT_TYPES,
  type TestEventData as PublishedTestEventData,
  type HooklineEnvelope,
  type WebhookDelivery,
  type WebhookEnvelope,
  type WebhookEventType,
} from '@hookline/verify';
import { describe, expect, it } from 'vitest';
import type { DeliverJob } from '../../src/domain/delivery.js';
import {
  buildEnvelope,
  parseEvent,
  type EventResult,
  type IngestEventInput,
  type TestEventData,
  type WebhookEvent,
} from '../../src/domain/event.js';
import type { Webhook } from '../../src/domain/webhook.js';
import { TestEventSender } from '../../src/tasks/test-event.js';

/** True only when `A` and `B` are the same type, not merely assignable to each other. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type Expect<T extends true> = T;
type DataOf<E extends { event_type: string; data: unknown }, T extends E['event_type']> = Extract<
  E,
  { event_type: T }
>['data'];

// Each event type is spelled out: `Equal` inside a generic alias would be decided before the type
// is known. Vendors receive `data` exactly as the producer sent it, so an envelope's data is what
// ingest accepts for its type.
type _ThePackageTypesAreTheEngines = [
  Expect<Equal<ProducerEvent, IngestEventInput>>,
  Expect<Equal<PublishedEventResult, EventResult>>,
  Expect<Equal<PublishedTestEventData, TestEventData>>,
  Expect<Equal<WebhookEnvelope['event_type'], WebhookEvent['event_type']>>,
  Expect<
    Equal<DataOf<WebhookEnvelope, 'EVENT_TYPE_MACHINE_CREATED'>, DataOf<IngestEventInput, 'EVENT_TYPE_MACHINE_CREATED'>>
  >,
  Expect<
    Equal<DataOf<WebhookEnvelope, 'EVENT_TYPE_MACHINE_UPDATED'>, DataOf<IngestEventInput, 'EVENT_TYPE_MACHINE_UPDATED'>>
  >,
  Expect<
    Equal<DataOf<WebhookEnvelope, 'EVENT_TYPE_MACHINE_REMOVED'>, DataOf<IngestEventInput, 'EVENT_TYPE_MACHINE_REMOVED'>>
  >,
  Expect<
    Equal<
      DataOf<WebhookEnvelope, 'EVENT_TYPE_DEPLOYMENT_CREATED'>,
      DataOf<IngestEventInput, 'EVENT_TYPE_DEPLOYMENT_CREATED'>
    >
  >,
  Expect<
    Equal<
      DataOf<WebhookEnvelope, 'EVENT_TYPE_DEPLOYMENT_UPDATED'>,
      DataOf<IngestEventInput, 'EVENT_TYPE_DEPLOYMENT_UPDATED'>
    >
  >,
  Expect<
    Equal<
      DataOf<WebhookEnvelope, 'EVENT_TYPE_DEPLOYMENT_STOPPED'>,
      DataOf<IngestEventInput, 'EVENT_TYPE_DEPLOYMENT_STOPPED'>
    >
  >,
];

const EVENT_IDS = ['0d4b5a4e-1f59-4e57-9a7e-3c2c7d1f6b10', '1d4b5a4e-1f59-4e57-9a7e-3c2c7d1f6b11'] as const;
const TIMESTAMP = '2024-05-01T14:00:00+02:00';

/** Every field the package types name, set, so a field the engine does not know fails below. */
const machine = {
  status: 'available',
  metadata: { machine_id: 'm-1', geo_location: { country: 'Germany', city: 'Berlin' }, cuda_version: '12.4' },
  hardware_specs: {
    cpu: { model: 'AMD EPYC 7763', cpu_arch: 'x86_64', cores: 64, threads: 128, base_clock: 2450, boost_clock: 3500 },
    memory: { total_memory: 256, memory_required: 16 },
    storage: { disk_space_available: 2000, disk_type: 'nvme', disk_name: 'nvme0n1' },
    gpus: [{ id: 'g-0', name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 }],
  },
  network_info: { bandwidth: 10_000 },
  machine_prices: [{ id: 'p-1', amount: '2.45', currency: 'USD' }],
};
const deployment = {
  deployment_id: 'd-1',
  machine_id: 'm-1',
  status: 'STATUS_FAILED',
  fail_reason: 'out of memory',
  metadata: { region: 'eu' },
} as const;

const events: ProducerEvent[] = [
  {
    event_id: EVENT_IDS[0],
    event_type: 'EVENT_TYPE_MACHINE_CREATED',
    vendor_id: 'v-1',
    timestamp: TIMESTAMP,
    data: machine,
  },
  { event_type: 'EVENT_TYPE_MACHINE_UPDATED', vendor_id: 'v-1', data: machine },
  { event_type: 'EVENT_TYPE_MACHINE_REMOVED', vendor_id: 'v-1', data: { metadata: { machine_id: 'm-1' } } },
  { event_type: 'EVENT_TYPE_MACHINE_REMOVED', vendor_id: 'v-1', data: machine },
  { event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED', vendor_id: 'v-1', data: deployment },
  {
    event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
    vendor_id: 'v-1',
    data: { deployment_id: 'd-1', machine_id: 'm-1', status: 'STATUS_RUNNING' },
  },
  { event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED', vendor_id: 'v-1', data: deployment },
  {
    event_id: EVENT_IDS[1],
    event_type: 'TASK_UPDATED',
    vendor_id: 'v-1',
    timestamp: TIMESTAMP,
    data: { task_id: EVENT_IDS[1], status: 'in_progress', fail_reason: null, progress: { total: 10, done: 3 } },
  },
];

describe('events written to the package types', () => {
  it('cover every event type', () => {
    expect(new Set(events.map((e) => e.event_type))).toEqual(new Set([...WEBHOOK_EVENT_TYPES, 'TASK_UPDATED']));
  });

  it.each(events.map((event) => [event.event_type, event] as const))(
    '%s: is accepted by ingest and reaches the vendor as the envelope type says',
    (_, event) => {
      const parsed = parseEvent(event, { acceptedAtMs: Date.UTC(2024, 4, 1, 12), newId: () => EVENT_IDS[0] });
      if (!parsed.ok) throw new Error(`rejected: ${parsed.reason}`);
      if (parsed.event.event_type === 'TASK_UPDATED') return;
      const body = buildEnvelope({ ...parsed.event, data: parsed.event.sentData });
      const expected = {
        version: '1.0',
        event_id: parsed.event.event_id,
        event_type: parsed.event.event_type,
        timestamp: new Date(parsed.event.timestampMs).toISOString(),
        data: event.data,
      } satisfies HooklineEnvelope<WebhookEventType, unknown>;
      // The same keys in the same order, with the same values.
      expect(body).toBe(JSON.stringify(expected));
      expect(isTestEvent(JSON.parse(body) as WebhookDelivery)).toBe(false);
    },
  );
});

describe('a test event', () => {
  it('is an envelope that isTestEvent recognises', async () => {
    const jobs: DeliverJob[] = [];
    const sender = new TestEventSender({
      queues: { add: async (added) => void jobs.push(...added) },
      log: { recordQueued: async () => undefined },
      nowMs: () => Date.UTC(2024, 4, 1, 12),
    });
    const webhook = { id: 'w-1', vendorId: 'v-1', eventType: 'EVENT_TYPE_MACHINE_UPDATED' } as Webhook;
    const { eventId } = await sender.send(webhook);
    const delivery = JSON.parse(jobs[0]!.body) as WebhookDelivery;
    expect(Object.keys(delivery)).toEqual(['version', 'event_id', 'event_type', 'timestamp', 'data']);
    expect(delivery).toMatchObject({
      version: '1.0',
      event_id: eventId,
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      timestamp: '2024-05-01T12:00:00.000Z',
    });
    expect(isTestEvent(delivery)).toBe(true);
  });
});
