import { randomBytes } from 'node:crypto';
import type { AgentStatus } from '../../src/domain/agent.js';
import type { IngestEventInput } from '../../src/domain/event.js';
import type { WebhookEventType } from '../../src/domain/events.js';
import type { Machine } from '../../src/domain/machine.js';
import type { Task } from '../../src/domain/task.js';
import { Ingestor, type DeliveryEnqueuer, type DeliveryRequest } from '../../src/ingest/ingest.js';
import { ReadModelProjector } from '../../src/ingest/read-model-projector.js';
import { RedisEventDedupe } from '../../src/store/event-dedupe.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { RedisMachineStore } from '../../src/store/machines.js';
import { RedisReadModelFeed } from '../../src/store/read-model-feed.js';
import { createAgentStatusStore, createTaskStore } from '../../src/store/read-models.js';
import type { Redis } from '../../src/store/redis.js';
import { SecretBox } from '../../src/store/secret-box.js';
import { RedisWebhookStore } from '../../src/store/webhooks.js';
import { readModelsProjected } from './read-models.js';
import { testRedis, type TestRedis } from './redis.js';

/** Records every enqueue call (a stand-in for the delivery queues, not for Redis); can be made to fail. */
class RecordingEnqueuer implements DeliveryEnqueuer {
  readonly calls: DeliveryRequest[][] = [];
  /** While set, enqueue rejects with it and records nothing. */
  failure: Error | undefined;

  get requests(): DeliveryRequest[] {
    return this.calls.flat();
  }

  async enqueue(requests: readonly DeliveryRequest[]): Promise<void> {
    if (this.failure) throw this.failure;
    this.calls.push([...requests]);
  }
}

/** The fixtures' dedupe window (the default of HOOKLINE_DEDUPE_WINDOW). */
export const DEDUPE_WINDOW_MS = 48 * 3_600_000;

/** 2024-05-01T12:00:00.000Z, the fixtures' "now". */
export const NOW_MS = Date.UTC(2024, 4, 1, 12);

export interface IngestFixture {
  t: TestRedis;
  redis: Redis;
  keys: RedisKeys;
  machines: RedisMachineStore;
  agents: ReturnType<typeof createAgentStatusStore>;
  tasks: ReturnType<typeof createTaskStore>;
  webhooks: RedisWebhookStore;
  enqueuer: RecordingEnqueuer;
  ingestor: Ingestor;
  dedupe: RedisEventDedupe;
  /** Whether each id is marked ingested, as the ingestor's clock sees it now. */
  seen(...eventIds: string[]): Promise<boolean[]>;
  /** The ingestor's clock; tests may move it. */
  clock: { nowMs: number };
  /**
   * Ingests through the fixture's Ingestor as the HTTP source, then waits (bounded: see
   * readModelsProjected) until the fixture's projector has made what it accepted visible in the
   * read models, as a lookup after the call would eventually see it.
   */
  ingest(events: readonly unknown[]): ReturnType<Ingestor['ingest']>;
  /** Registers a webhook and returns its id. */
  subscribe(vendorId: string, eventType: WebhookEventType): Promise<string>;
  /** Stops the fixture's projector (a test that runs its own). */
  stopProjector(): Promise<void>;
  /** Stops the projector and closes the connection, leaving the data (another fixture or app shares the prefix). */
  close(): Promise<void>;
  cleanup(): Promise<void>;
}

/** An Ingestor over the suite's real Redis (fresh key prefix), real stores and a recording enqueuer; `eventBytesMax`: HOOKLINE_MAX_EVENT_BYTES. */
export function ingestFixture(options: { eventBytesMax?: number; prefix?: string } = {}): IngestFixture {
  const t = testRedis(undefined, options.prefix);
  const keys = redisKeys(t.prefix);
  const machines = new RedisMachineStore(t.redis, keys);
  const agents = createAgentStatusStore(t.redis, keys);
  const tasks = createTaskStore(t.redis, keys);
  const webhooks = new RedisWebhookStore(t.redis, keys, new SecretBox(randomBytes(32)));
  const enqueuer = new RecordingEnqueuer();
  const clock = { nowMs: NOW_MS };
  const dedupe = new RedisEventDedupe(t.redis, t.prefix, { windowMs: DEDUPE_WINDOW_MS });
  const ingestor = new Ingestor({
    dedupe,
    readModels: new RedisReadModelFeed(t.redis, keys.readModels.projection),
    subscriptions: webhooks,
    deliveries: enqueuer,
    nowMs: () => clock.nowMs,
    ...(options.eventBytesMax === undefined ? {} : { eventBytesMax: options.eventBytesMax }),
  });
  // The read models' projector, as every engine process runs one.
  const projector = new ReadModelProjector({
    redis: t.redis,
    stream: keys.readModels.projection,
    machines,
    agents,
    tasks,
    logger: { info: () => undefined, warn: () => undefined, error: () => undefined },
  });
  const started = projector.start();
  return {
    t,
    redis: t.redis,
    keys,
    machines,
    agents,
    tasks,
    webhooks,
    enqueuer,
    ingestor,
    dedupe,
    seen: (...eventIds) => dedupe.seen(eventIds, clock.nowMs),
    clock,
    async ingest(events) {
      await started;
      try {
        return await ingestor.ingest(events, 'http');
      } finally {
        await readModelsProjected(t.redis, keys);
      }
    },
    async subscribe(vendorId, eventType) {
      const created = await webhooks.create(vendorId, {
        eventType,
        callbackUrl: `https://receiver.example/${vendorId}/${eventType}`,
      });
      if (!created.ok) throw new Error(`webhook for ${vendorId} ${eventType} already exists`);
      return created.webhook.id;
    },
    async stopProjector() {
      await started.catch(() => undefined);
      await projector.stop();
    },
    async close() {
      await this.stopProjector();
      machines.close();
      await t.redis.quit();
    },
    async cleanup() {
      await this.stopProjector();
      machines.close();
      await t.cleanup();
    },
  };
}

export function machine(id: string, status = 'available'): Machine {
  return {
    status,
    metadata: { machine_id: id, geo_location: { country: 'Germany', city: 'Berlin' }, cuda_version: '12.4' },
    hardware_specs: {
      cpu: { model: 'AMD EPYC 7763', cpu_arch: 'x86_64', cores: 64, threads: 128 },
      memory: { total_memory: 256, memory_required: 16 },
      gpus: [{ id: `${id}-gpu-0`, name: 'NVIDIA A100 80GB PCIe', memory: 80 }],
    },
    network_info: { bandwidth: 10_000 },
    machine_prices: [{ id: `${id}-p1`, amount: '2.45', currency: 'USD' }],
  };
}

export function agent(deploymentId: string, status: AgentStatus['status'], failReason = ''): AgentStatus {
  return {
    deployment_id: deploymentId,
    machine_id: 'm-1',
    status,
    fail_reason: failReason,
    metadata: { region: 'eu-central' },
  };
}

export function task(taskId: string, status: Task['status'], failReason: string | null = null): Task {
  return { task_id: taskId, status, fail_reason: failReason };
}

/** A valid ingest event of `eventType` for `vendorId` with fitting data. */
export function sampleEvent(
  eventType: WebhookEventType,
  vendorId: string,
  extra: Partial<IngestEventInput> = {},
): IngestEventInput {
  const data = eventType.startsWith('EVENT_TYPE_MACHINE')
    ? eventType === 'EVENT_TYPE_MACHINE_REMOVED'
      ? { metadata: { machine_id: 'm-1' } }
      : machine('m-1')
    : agent('dep-1', eventType === 'EVENT_TYPE_DEPLOYMENT_STOPPED' ? 'STATUS_STOPPED' : 'STATUS_RUNNING');
  return { event_type: eventType, vendor_id: vendorId, data, ...extra } as IngestEventInput;
}
