import { randomBytes, randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import type { DeliverJob } from '../src/domain/delivery.js';
import type { FilterNode } from '../src/domain/filter.js';
import { JOBS } from '../src/delivery/jobs.js';
import { deliveryIdFor } from '../src/domain/ids.js';
import { connectRedis } from '../src/store/redis.js';
import { wallMs } from './measure.js';
import { cpuMeter, type DeliveryBenchSetup } from './delivery.js';
import { BenchEngine } from './engine.js';
import { deleteKeys } from './redis-info.js';
import { BENCH_EVENT_TYPE, batchBodies, EventFactory, eventsFor, runParallel, vendorId } from './workload.js';

export interface IngestFigures {
  events: number;
  batchSize: number;
  /** Events accepted per second through POST /internal/v1/events. */
  hooklinePerSecond: number;
  /** Equivalent delivery jobs per second through a plain BullMQ Queue.addBulk. */
  addBulkPerSecond: number;
  /** CPU per event of this process (server and client) and of Redis, each side. */
  hooklineProcessCpuUsPerEvent: number;
  hooklineRedisCpuUsPerEvent: number;
  addBulkProcessCpuUsPerEvent: number;
  addBulkRedisCpuUsPerEvent: number;
}

const BATCH_SIZE = 1_000;

/**
 * Ingest alone (no worker): `events` events POSTed in batches of 1000 to webhooks that exist,
 * against the same number of equivalent delivery jobs (same data, job id and options as Hookline's)
 * added with addBulk in batches of 1000, with the same number of calls in flight.
 */
export async function ingestThroughput(setup: DeliveryBenchSetup, events: number): Promise<IngestFigures> {
  const factory = new EventFactory(setup.payloadBytes, 50);
  // Both sides warm up on as many events (the delivery runs' warm-up), so each is measured compiled.
  const warm = Math.max(2 * BATCH_SIZE, Math.ceil(setup.warmup / BATCH_SIZE) * BATCH_SIZE);
  const hookline = await (async () => {
    const engine = await BenchEngine.start({
      redisUrl: setup.redisUrl,
      config: setup.config,
      apiConnections: setup.posters,
    });
    try {
      const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors });
      await engine.registerWebhooks(
        Array.from({ length: setup.vendors }, (_, i) => run.url(i)),
        run.secrets,
      );
      await run.forget();
      return await postMeasured(
        engine,
        setup,
        batchBodies(eventsFor(factory, warm, setup.vendors), BATCH_SIZE),
        batchBodies(eventsFor(factory, events, setup.vendors, warm), BATCH_SIZE),
        events,
      );
    } finally {
      await engine.close();
    }
  })();

  const addBulk = await (async () => {
    const prefix = `bench-raw-${randomBytes(4).toString('hex')}`;
    const connection = connectRedis(setup.redisUrl, {
      connectionName: prefix,
      maxRetriesPerRequest: null,
      autoPipelining: false,
    });
    const queue = new Queue('deliveries', { connection, prefix });
    const webhookIds = Array.from({ length: setup.vendors }, () => randomUUID());
    const jobs = (count: number, first: number) =>
      eventsFor(factory, count, setup.vendors, first).map((event, i) => {
        const webhookId = webhookIds[(first + i) % setup.vendors]!;
        const data: DeliverJob = {
          deliveryId: deliveryIdFor(event.event_id, webhookId),
          eventId: event.event_id,
          eventType: BENCH_EVENT_TYPE,
          vendorId: vendorId((first + i) % setup.vendors),
          webhookId,
          body: factory.envelopeOf(event),
          acceptedAtMs: Date.now(),
        };
        return {
          name: JOBS.deliver.name,
          data,
          opts: {
            jobId: data.deliveryId,
            attempts: 20,
            backoff: { type: 'hookline' },
            delay: 0,
            removeOnComplete: true,
            removeOnFail: { age: 7 * 24 * 3_600 },
          },
        };
      });
    const batches = (list: ReturnType<typeof jobs>) =>
      Array.from({ length: Math.ceil(list.length / BATCH_SIZE) }, (_, b) =>
        list.slice(b * BATCH_SIZE, (b + 1) * BATCH_SIZE),
      );
    const add = async (batch: ReturnType<typeof jobs>) => {
      await queue.addBulk(batch);
    };
    try {
      await runParallel(batches(jobs(warm, 0)), setup.posters, add);
      const measured = batches(jobs(events, warm));
      const cpu = await cpuMeter(setup.infoRedis);
      const startMs = wallMs();
      await runParallel(measured, setup.posters, add);
      const perSecond = events / ((wallMs() - startMs) / 1000);
      return { perSecond, ...(await cpu.stop()) };
    } finally {
      await queue.close();
      await deleteKeys(connection, `${prefix}:*`);
      await connection.quit();
    }
  })();

  return {
    events,
    batchSize: BATCH_SIZE,
    hooklinePerSecond: hookline.perSecond,
    addBulkPerSecond: addBulk.perSecond,
    hooklineProcessCpuUsPerEvent: hookline.processUs / events,
    hooklineRedisCpuUsPerEvent: hookline.redisUs / events,
    addBulkProcessCpuUsPerEvent: addBulk.processUs / events,
    addBulkRedisCpuUsPerEvent: addBulk.redisUs / events,
  };
}

export interface FilterCostFigures {
  events: number;
  webhooks: number;
  /** Events accepted per second with no webhook holding a filter. */
  plainPerSecond: number;
  /** The same with every webhook holding FILTER (which matches every bench event, so both make the same deliveries). */
  filteredPerSecond: number;
  /** CPU per event of this process (API and producers), each side. */
  plainProcessCpuUsPerEvent: number;
  filteredProcessCpuUsPerEvent: number;
}

/** Eight nodes over the envelope, of every kind of comparison a filter may hold; every bench event matches it. */
const BENCH_FILTER = {
  and: [
    { path: 'event_type', eq: BENCH_EVENT_TYPE },
    { path: 'data.status', in: ['STATUS_RUNNING', 'STATUS_PENDING'] },
    { not: { path: 'data.fail_reason', ne: '' } },
    {
      or: [
        { path: 'data.metadata.region', eq: 'eu-central' },
        { path: 'data.metadata.gpus', gte: 8 },
      ],
    },
  ],
} as const;

/**
 * The ingest cost of payload filters: `events` events POSTed to `webhooks` webhooks (one per vendor)
 * without filters, then the same with every webhook holding BENCH_FILTER; one engine each, no worker.
 */
export async function ingestFilterCost(
  setup: DeliveryBenchSetup,
  events: number,
  webhooks: number,
): Promise<FilterCostFigures> {
  const factory = new EventFactory(setup.payloadBytes, 50);
  const run = async (filter: object | undefined) => {
    const engine = await BenchEngine.start({
      redisUrl: setup.redisUrl,
      config: setup.config,
      apiConnections: setup.posters,
    });
    try {
      for (let i = 0; i < webhooks; i += 1) {
        const created = await engine.stores.webhooks.create(vendorId(i), {
          eventType: BENCH_EVENT_TYPE,
          callbackUrl: `http://127.0.0.1:9/hook-${i}`,
          ...(filter === undefined ? {} : { filter: filter as FilterNode }),
        });
        if (!created.ok) throw new Error(`webhook ${i} already exists`);
      }
      // Warm-up: every webhook's filter read and compiled once, as in a running API.
      return await postMeasured(
        engine,
        setup,
        batchBodies(eventsFor(factory, webhooks, webhooks), BATCH_SIZE),
        batchBodies(eventsFor(factory, events, webhooks, webhooks), BATCH_SIZE),
        events,
      );
    } finally {
      await engine.close();
    }
  };
  const plain = await run(undefined);
  const filtered = await run(BENCH_FILTER);
  return {
    events,
    webhooks,
    plainPerSecond: plain.perSecond,
    filteredPerSecond: filtered.perSecond,
    plainProcessCpuUsPerEvent: plain.processUs / events,
    filteredProcessCpuUsPerEvent: filtered.processUs / events,
  };
}

/** Posts the warm-up bodies, then the measured ones: events accepted per second and the CPU they took. */
async function postMeasured(
  engine: BenchEngine,
  setup: DeliveryBenchSetup,
  warmUp: { body: string; count: number }[],
  measured: { body: string; count: number }[],
  events: number,
): Promise<{ perSecond: number; processUs: number; redisUs: number }> {
  const post = async ({ body, count }: { body: string; count: number }) => {
    await engine.post(body, count);
  };
  await runParallel(warmUp, setup.posters, post);
  const cpu = await cpuMeter(setup.infoRedis);
  const startMs = wallMs();
  await runParallel(measured, setup.posters, post);
  const perSecond = events / ((wallMs() - startMs) / 1000);
  return { perSecond, ...(await cpu.stop()) };
}
