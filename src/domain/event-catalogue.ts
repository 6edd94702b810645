import { z } from 'zod';
import { envelopeSchema } from './event.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from './events.js';

/**
 * The event catalogue a vendor reads in the portal (`GET /portal/v1/catalogue`): for each of the six
 * event types, what it means, the JSON Schema of the body a webhook receives (generated from the
 * same zod schema the sender is tested against, so the two cannot drift) and a realistic sample.
 */

/** A machine as the platform describes one (interface section 2), for the samples. */
const SAMPLE_MACHINE = {
  status: 'available',
  metadata: { machine_id: 'm-7f3a21', geo_location: { country: 'Germany', city: 'Frankfurt' }, cuda_version: '12.4' },
  hardware_specs: {
    cpu: { model: 'AMD EPYC 7763', cpu_arch: 'x86_64', cores: 64, threads: 128, base_clock: 2450, boost_clock: 3500 },
    memory: { total_memory: 512, memory_required: 32 },
    storage: { disk_space_available: 3800, disk_type: 'NVMe', disk_name: 'nvme0n1' },
    gpus: [
      { id: 'gpu-0', name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
      { id: 'gpu-1', name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
    ],
  },
  network_info: { bandwidth: 10000 },
  machine_prices: [
    { id: 'price-usd-hourly', amount: '2.45', currency: 'USD' },
    { id: 'price-btc-hourly', amount: '0.000036', currency: 'BTC' },
  ],
};

const SAMPLE_DEPLOYMENT = {
  deployment_id: 'dep-5c81e0',
  machine_id: 'm-7f3a21',
  fail_reason: '',
  metadata: { image: 'vllm/vllm-openai:0.6.3', region: 'eu-central' },
};

/** Each type's `data` in its sample, and the sample's event id (distinct, so samples are told apart). */
const SAMPLE_DATA: Record<WebhookEventType, { eventId: string; timestamp: string; data: unknown }> = {
  EVENT_TYPE_MACHINE_CREATED: {
    eventId: '0b9d7c52-3f1e-4a8b-9c2d-6e5f4a3b2c10',
    timestamp: '2026-03-02T09:14:05.120Z',
    data: SAMPLE_MACHINE,
  },
  EVENT_TYPE_MACHINE_UPDATED: {
    eventId: '1c0e8d63-4a2f-4b9c-8d3e-7f6a5b4c3d21',
    timestamp: '2026-03-02T11:40:17.503Z',
    data: { ...SAMPLE_MACHINE, status: 'unavailable' },
  },
  EVENT_TYPE_MACHINE_REMOVED: {
    eventId: '2d1f9e74-5b3a-4c0d-9e4f-8a7b6c5d4e32',
    timestamp: '2026-03-03T16:02:44.000Z',
    data: { metadata: { machine_id: 'm-7f3a21' } },
  },
  EVENT_TYPE_DEPLOYMENT_CREATED: {
    eventId: '3e2a0f85-6c4b-4d1e-8f5a-9b8c7d6e5f43',
    timestamp: '2026-03-02T12:00:01.874Z',
    data: { ...SAMPLE_DEPLOYMENT, status: 'STATUS_PENDING' },
  },
  EVENT_TYPE_DEPLOYMENT_UPDATED: {
    eventId: '4f3b1a96-7d5c-4e2f-9a6b-0c9d8e7f6a54',
    timestamp: '2026-03-02T12:01:36.219Z',
    data: { ...SAMPLE_DEPLOYMENT, status: 'STATUS_RUNNING' },
  },
  EVENT_TYPE_DEPLOYMENT_STOPPED: {
    eventId: '5a4c2ba7-8e6d-4f3a-8b7c-1d0e9f8a7b65',
    timestamp: '2026-03-02T18:30:12.006Z',
    data: {
      ...SAMPLE_DEPLOYMENT,
      status: 'STATUS_FAILED',
      fail_reason: 'container exited with code 137 (out of memory)',
    },
  },
};

export interface CatalogueEntry {
  event_type: WebhookEventType;
  description: string;
  /** JSON Schema (draft 2020-12) of the whole body a webhook of this type receives. */
  schema: Record<string, unknown>;
  /** A body as it is sent: the envelope with this type's data. */
  sample: { version: '1.0'; event_id: string; event_type: WebhookEventType; timestamp: string; data: unknown };
}

/**
 * The six entries, in the order the interface lists the types. The schemas are written for what
 * arrives (`io: 'input'`): `data` is delivered as the producer sent it, so its objects may carry
 * fields the schema does not name, and fields with a default may be absent.
 */
export function eventCatalogue(): CatalogueEntry[] {
  return WEBHOOK_EVENT_TYPES.map((eventType) => {
    const schema = envelopeSchema(eventType);
    const { eventId, timestamp, data } = SAMPLE_DATA[eventType];
    return {
      event_type: eventType,
      description: schema.meta()?.description ?? eventType,
      schema: z.toJSONSchema(schema, { io: 'input' }),
      sample: { version: '1.0', event_id: eventId, event_type: eventType, timestamp, data },
    };
  });
}
