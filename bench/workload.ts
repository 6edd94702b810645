import { randomUUID } from 'node:crypto';
import type { Machine } from '../src/domain/machine.js';
import { buildEnvelope, parseEvent, type WebhookEvent } from '../src/domain/event.js';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../src/domain/events.js';

/** The event type every bench event has; each vendor has one webhook for it. */
export const BENCH_EVENT_TYPE: WebhookEventType = 'EVENT_TYPE_DEPLOYMENT_UPDATED';

export const vendorId = (index: number) => `bench-vendor-${String(index).padStart(4, '0')}`;

/** An event as a producer sends it. */
export interface ProducerEvent {
  event_id: string;
  event_type: WebhookEventType | 'TASK_UPDATED';
  vendor_id: string;
  timestamp?: string;
  data: unknown;
}

/** What a throughput run sends: the events, and the types each vendor subscribes a webhook to (the others are not delivered). */
export interface Workload {
  /** Event number `n` (numbered in posting order) for the vendor at `vendorIndex`. */
  event(vendorIndex: number, n: number): ProducerEvent;
  /** Every vendor's webhooks, one per type, all to the vendor's receiver target. */
  readonly eventTypes: readonly WebhookEventType[];
}

/** The events of `events` that a webhook of `workload` receives. */
export const deliveredOf = (workload: Workload, events: readonly ProducerEvent[]) =>
  events.filter((event) => (workload.eventTypes as readonly string[]).includes(event.event_type)).length;

/** One producer event: a deployment status update of the vendor's deployment, padded to the payload size. */
export interface BenchEvent {
  event_id: string;
  event_type: WebhookEventType;
  vendor_id: string;
  data: {
    deployment_id: string;
    machine_id: string;
    status: 'STATUS_RUNNING';
    fail_reason: string;
    metadata: Record<string, string>;
  };
}

/**
 * Builds events whose envelope (the body a receiver gets) is `payloadBytes` long, give or take a
 * byte: every id is fixed-width, so one padding length fits all. Each vendor has `deploymentsPerVendor`
 * deployments, so the read model stays small and the figures are about deliveries.
 */
export class EventFactory implements Workload {
  readonly eventTypes = [BENCH_EVENT_TYPE];
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

/** Rounds a machine stays listed in the mix: the machine created in round r is removed in round r + 40. */
const MIX_MACHINE_ROUNDS_LISTED = 40;
/** Deployments in the mix's read model (a round's deployment reuses the id of the one as many rounds before). */
const MIX_DEPLOYMENTS = 5_000;

/** One round of the mix, in order: each event's type and the status its data carries. */
const MIX_ROUND: readonly (readonly [ProducerEvent['event_type'], string])[] = [
  ['EVENT_TYPE_MACHINE_CREATED', 'available'],
  ['EVENT_TYPE_DEPLOYMENT_CREATED', 'STATUS_PENDING'],
  ['EVENT_TYPE_MACHINE_UPDATED', 'unavailable'],
  ['TASK_UPDATED', 'in_progress'],
  ['EVENT_TYPE_DEPLOYMENT_UPDATED', 'STATUS_RUNNING'],
  ['TASK_UPDATED', 'success'],
  ['EVENT_TYPE_DEPLOYMENT_UPDATED', 'STATUS_STOPPING'],
  ['EVENT_TYPE_DEPLOYMENT_STOPPED', 'STATUS_STOPPED'],
  ['EVENT_TYPE_MACHINE_UPDATED', 'available'],
  ['EVENT_TYPE_MACHINE_REMOVED', ''],
];

/**
 * All six webhook event types and TASK_UPDATED, in the order one rental produces them: each round of
 * ten events lists a machine, deploys on it (the machine unavailable), reports the deployment's task,
 * stops it (the machine available again), and removes the machine listed 40 rounds before. Machine
 * events are 40 % of the events (the read model's one slot takes all of them), deployment events 40 %,
 * TASK_UPDATED 20 %; the types alternate within every batch, as producers of a busy platform
 * interleave them. Every event carries its time (its number in ms past the start), so later events
 * are newer and one that a concurrent batch overtook is stale. Payloads are their natural size.
 */
export class MixedWorkload implements Workload {
  readonly eventTypes = WEBHOOK_EVENT_TYPES;
  private readonly startMs = Date.now();

  /** The mix's shares, e.g. "machine 40 %, deployment 40 %, TASK_UPDATED 20 %". */
  static describe(): string {
    const kindOf = (type: string) =>
      type.startsWith('EVENT_TYPE_MACHINE')
        ? 'machine'
        : type.startsWith('EVENT_TYPE_DEPLOYMENT')
          ? 'deployment'
          : type;
    const counts = new Map<string, number>();
    for (const [type] of MIX_ROUND) counts.set(kindOf(type), (counts.get(kindOf(type)) ?? 0) + 1);
    return [...counts].map(([kind, n]) => `${kind} ${Math.round((100 * n) / MIX_ROUND.length)} %`).join(', ');
  }

  event(vendorIndex: number, n: number): ProducerEvent {
    const round = Math.floor(n / MIX_ROUND.length);
    const [eventType, status] = MIX_ROUND[n % MIX_ROUND.length]!;
    const machineId = (r: number) => `mix-m-${String(r).padStart(7, '0')}`;
    let data: unknown;
    if (eventType === 'EVENT_TYPE_MACHINE_REMOVED')
      data = { metadata: { machine_id: machineId(round - MIX_MACHINE_ROUNDS_LISTED) } };
    else if (eventType.startsWith('EVENT_TYPE_MACHINE')) data = mixMachine(machineId(round), status);
    else if (eventType === 'TASK_UPDATED')
      data = { task_id: `00000000-0000-4000-8000-${String(round).padStart(12, '0')}`, status, fail_reason: null };
    else {
      data = {
        deployment_id: `mix-d-${String(round % MIX_DEPLOYMENTS).padStart(5, '0')}`,
        machine_id: machineId(round),
        status,
        fail_reason: '',
        metadata: { region: 'eu-central', image: 'ghcr.io/example/inference:1.4.2' },
      };
    }
    return {
      event_id: randomUUID(),
      event_type: eventType,
      vendor_id: vendorId(vendorIndex),
      timestamp: new Date(this.startMs + n).toISOString(),
      data,
    };
  }
}

/** A machine as the platform describes one: two GPUs, two prices (about 800 bytes of JSON). */
function mixMachine(machineId: string, status: string): Machine {
  return {
    status,
    metadata: { machine_id: machineId, geo_location: { country: 'Germany', city: 'Frankfurt' }, cuda_version: '12.4' },
    hardware_specs: {
      cpu: { model: 'AMD EPYC 7763', cpu_arch: 'x86_64', cores: 64, threads: 128, base_clock: 2450, boost_clock: 3500 },
      memory: { total_memory: 512, memory_required: 16 },
      storage: { disk_space_available: 3840, disk_type: 'NVMe', disk_name: 'nvme0n1' },
      gpus: [0, 1].map((i) => ({
        id: `${machineId}-gpu-${i}`,
        name: 'NVIDIA A100 80GB PCIe',
        memory: 80,
        cuda_cores: 6912,
        tensor_cores: 432,
        flops: 312,
      })),
    },
    network_info: { bandwidth: 10_000 },
    machine_prices: [
      { id: `${machineId}-usd`, amount: '1.89', currency: 'USD' },
      { id: `${machineId}-btc`, amount: '0.00003', currency: 'BTC' },
    ],
  };
}

/** `count` events spread round-robin over `vendors` vendors, starting at event number `first`. */
export function eventsFor<E>(
  factory: { event(vendorIndex: number, n: number): E },
  count: number,
  vendors: number,
  first = 0,
  vendorOf = (n: number) => n % vendors,
): E[] {
  return Array.from({ length: count }, (_, i) => factory.event(vendorOf(first + i), first + i));
}

/** Request bodies of `{ events: [...] }`, `batchSize` events each, built before any timing starts. */
export function batchBodies(events: readonly unknown[], batchSize: number): { body: string; count: number }[] {
  const bodies: { body: string; count: number }[] = [];
  for (let i = 0; i < events.length; i += batchSize) {
    const batch = events.slice(i, i + batchSize);
    bodies.push({ body: JSON.stringify({ events: batch }), count: batch.length });
  }
  return bodies;
}

/** Runs `work(item)` over `items` with `parallel` workers; each item once, in order of start. */
export async function runParallel<T>(
  items: readonly T[],
  parallel: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      await work(items[index]!, index);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(parallel, items.length)) }, worker));
}
