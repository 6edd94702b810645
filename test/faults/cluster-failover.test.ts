import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { findRedisServerBinary } from '../../src/embedded/redis-server.js';
import { connectRedis, keySlot, type Redis } from '../../src/store/redis.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { TestReceiver } from '../helpers/receiver.js';
import { startRedisCluster, type RedisClusterHandle } from '../helpers/redis-cluster.js';
import { settles } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const serverBinary = await findRedisServerBinary();
const cliBinary = await findRedisServerBinary(undefined, undefined, 'redis-cli');
const missing = [serverBinary ? undefined : 'redis-server', cliBinary ? undefined : 'redis-cli'].filter(
  (name) => name !== undefined,
);
if (missing.length > 0) {
  if (process.env.CI)
    throw new Error(`the Redis Cluster fault tests need ${missing.join(' and ')} in CI (apt-get install redis-server)`);
  console.warn(
    `skipping the Redis Cluster fault tests: ${missing.join(' and ')} not installed (Debian: apt-get install redis-server)`,
  );
}

const VENDOR = 'v-failover';
/** Load: one stream entry every STREAM_EVERY_MS, one HTTP request of HTTP_BATCH events every HTTP_EVERY_MS. */
const STREAM_EVERY_MS = 20;
const HTTP_EVERY_MS = 50;
const HTTP_BATCH = 3;
/** Load before the fault (events flowing end to end first) and after the cluster settled. */
const EVENTS_BEFORE_FAULT = 60;
const LOAD_AFTER_MS = 3_000;
/** Bounds: the cluster settling after the fault, and everything acknowledged being ingested and delivered afterwards. */
const SETTLE_TIMEOUT_MS = 30_000;
const DRAIN_TIMEOUT_MS = 40_000;

const machineEvent = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  vendor_id: VENDOR,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});
type Event = ReturnType<typeof machineEvent>;

/**
 * Producers through a master's failover: one appends to the ingest stream, one posts batches over
 * HTTP, each re-sending what was not acknowledged (a 503 or a failed XADD), as the docs tell
 * producers to. Counts every answer, so a 500 is seen.
 */
class Producers {
  readonly streamed = new Set<string>();
  readonly posted = new Set<string>();
  readonly httpStatuses = new Map<number, number>();
  /** HTTP 503 answers without a Retry-After header. */
  noRetryAfter = 0;
  xaddFailures = 0;
  private readonly streamRetry: Event[] = [];
  private readonly httpRetry: Event[] = [];
  private running = true;
  private readonly loops: Promise<void>[];

  constructor(
    private readonly t: TestApp,
    private readonly producer: Redis,
    private readonly eventsKey: string,
  ) {
    this.loops = [this.loop(STREAM_EVERY_MS, () => this.append()), this.loop(HTTP_EVERY_MS, () => this.post())];
  }

  /** Stops the load, then re-sends what is still unacknowledged until it is (bounded). */
  async stop(timeoutMs: number): Promise<boolean> {
    this.running = false;
    await Promise.all(this.loops);
    return settles(async () => {
      if (this.streamRetry.length > 0) await this.append();
      if (this.httpRetry.length > 0) await this.post();
      return this.streamRetry.length === 0 && this.httpRetry.length === 0;
    }, timeoutMs);
  }

  private async loop(everyMs: number, step: () => Promise<void>): Promise<void> {
    while (this.running) {
      await step();
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  }

  private async append(): Promise<void> {
    const event = this.streamRetry.shift() ?? machineEvent();
    try {
      await this.producer.xadd(this.t.keys.events.stream, '*', 'event', JSON.stringify(event));
      this.streamed.add(event.event_id);
    } catch {
      this.xaddFailures += 1;
      this.streamRetry.push(event);
    }
  }

  private async post(): Promise<void> {
    const events =
      this.httpRetry.length > 0
        ? this.httpRetry.splice(0, HTTP_BATCH)
        : Array.from({ length: HTTP_BATCH }, machineEvent);
    const res = await this.t.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': this.eventsKey },
      payload: { events },
    });
    this.httpStatuses.set(res.statusCode, (this.httpStatuses.get(res.statusCode) ?? 0) + 1);
    if (res.statusCode === 202) for (const event of events) this.posted.add(event.event_id);
    else {
      if (res.statusCode === 503 && res.headers['retry-after'] === undefined) this.noRetryAfter += 1;
      this.httpRetry.push(...events);
    }
  }
}

describe.skipIf(missing.length > 0)(
  'ingest through a Redis Cluster failover (3 masters with a replica each, loopback only)',
  () => {
    let cleanup: (() => Promise<void>) | undefined;
    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    for (const fault of ['failover', 'kill'] as const) {
      const what = fault === 'failover' ? 'CLUSTER FAILOVER of' : 'SIGKILL of';
      it(`${what} the ingest stream's master under load: the stream consumer resumes by itself, HTTP ingest answers 202 or 503 (never 500), nothing is lost`, async () => {
        const startedMs = Date.now();
        const dir = mkdtempSync(path.join(tmpdir(), 'hookline-failover-'));
        const started: { cluster?: RedisClusterHandle; t?: TestApp; worker?: TestWorker; producer?: Redis } = {};
        const receiver = new TestReceiver();
        cleanup = async () => {
          started.producer?.disconnect();
          await started.worker?.close();
          await started.t?.close();
          await receiver.close();
          await started.cluster?.stop();
          rmSync(dir, { recursive: true, force: true });
        };
        const cluster = (started.cluster = await startRedisCluster({
          serverBinary: serverBinary!,
          cliBinary: cliBinary!,
          dir,
          replicas: 1,
        }));
        // What the API and the worker log at warn and above, to show on a failure.
        const apiLog: string[] = [];
        const workerLog: string[] = [];
        const logTo = (lines: string[]) => pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
        const t = (started.t = await testApp({
          redisUrl: cluster.url,
          queuePartitions: 4,
          retryScheduleMs: [0, 200, 500, 1_000, 2_000, 5_000],
          logger: logTo(apiLog),
        }));
        await receiver.start();
        await t.register(VENDOR, `${receiver.base}/hook`, { event_type: 'EVENT_TYPE_MACHINE_UPDATED' });
        const eventsKey = await t.keyFor(['events:write']);
        started.worker = await startTestWorker(t, {
          ingestStream: true,
          breaker: { failureThreshold: 1_000 },
          logger: logTo(workerLog),
        });
        const producer = (started.producer = connectRedis(cluster.url, {
          connectionName: 'hookline-test-producer',
          maxRetriesPerRequest: 3,
        }));
        producer.on('error', () => undefined);

        const load = new Producers(t, producer, eventsKey);
        const received = () => new Set(receiver.at('/hook').map((request) => String(request.headers['webhook-id'])));
        const flowing = await settles(() => received().size >= EVENTS_BEFORE_FAULT, 20_000);

        const streamMaster = await cluster.masterOf(keySlot(t.keys.events.stream));
        const faultAtMs = Date.now();
        const newMaster =
          fault === 'failover'
            ? await cluster.failover(streamMaster, SETTLE_TIMEOUT_MS)
            : await cluster.killMaster(streamMaster, SETTLE_TIMEOUT_MS);
        const settledMs = Date.now() - faultAtMs;
        // The first entry appended once the cluster settled: how long the stream consumer takes to come back.
        const streamedBefore = new Set(load.streamed);
        const firstAfter = await settles(() => [...load.streamed].some((id) => !streamedBefore.has(id)), 5_000);
        const probeId = [...load.streamed].find((id) => !streamedBefore.has(id));
        const resumedAtMs =
          probeId === undefined
            ? undefined
            : (await settles(() => received().has(probeId), DRAIN_TIMEOUT_MS))
              ? Date.now()
              : undefined;
        await new Promise((resolve) => setTimeout(resolve, LOAD_AFTER_MS));
        const resent = await load.stop(DRAIN_TIMEOUT_MS);

        const accepted = new Set([...load.streamed, ...load.posted]);
        const allDelivered = await settles(() => [...accepted].every((id) => received().has(id)), DRAIN_TIMEOUT_MS);
        const tally = tallyDeliveries(
          accepted,
          receiver.at('/hook').map((request) => String(request.headers['webhook-id'])),
        );
        const statuses = Object.fromEntries([...load.httpStatuses].map(([status, count]) => [`http${status}`, count]));
        reportFault(`cluster-${fault}`, tally, startedMs, {
          streamed: load.streamed.size,
          posted: load.posted.size,
          ...statuses,
          noRetryAfter: load.noRetryAfter,
          xaddFailures: load.xaddFailures,
          settledMs,
          streamResumedMs: resumedAtMs === undefined ? 'never' : resumedAtMs - faultAtMs - settledMs,
          master: `${streamMaster}->${newMaster}`,
        });

        expect(flowing).toBe(true);
        expect(firstAfter).toBe(true);
        expect(
          resumedAtMs,
          `the stream consumer never came back; the worker's log:\n${workerLog.slice(-20).join('')}`,
        ).toBeDefined();
        expect(resent).toBe(true);
        expect(
          load.httpStatuses.get(500) ?? 0,
          `the API's log:\n${apiLog.filter((line) => line.includes('"status":500')).join('')}`,
        ).toBe(0);
        expect([...load.httpStatuses.keys()].filter((status) => status !== 202 && status !== 503)).toEqual([]);
        expect(load.noRetryAfter).toBe(0);
        expect(allDelivered).toBe(true);
        expect(tally.lost).toBe(0);
      }, 150_000);
    }
  },
);
