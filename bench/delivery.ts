import { randomBytes } from 'node:crypto';
import type { Config } from '../src/config/env.js';
import type { FinishedOutcome } from '../src/delivery/attempt.js';
import type { Redis } from '../src/store/redis.js';
import { bareUndiciLoop, NaiveBaseline, type ThroughputFigures } from './baselines.js';
import { percentile, sampleProcessMemory, sleep, waitUntil, wallMs } from './measure.js';
import { BenchEngine, type PostResult } from './engine.js';
import { LeanPipeline } from './lean.js';
import type { ReceiverProcess, ReceiverRun } from './receiver-client.js';
import { deleteKeys, redisCommandStats, redisCommands, redisCpuUs, writeCosts } from './redis-info.js';
import {
  BENCH_EVENT_TYPE,
  batchBodies,
  deliveredOf,
  EventFactory,
  eventsFor,
  runParallel,
  vendorId,
  type ProducerEvent,
  type Workload,
} from './workload.js';

/** Sizes and shared parts of the delivery scenarios. */
export interface DeliveryBenchSetup {
  redisUrl: string;
  /** A connection for INFO readings. */
  infoRedis: Redis;
  receiver: ReceiverProcess;
  config: Config;
  /** Events of a throughput run (BENCH_EVENTS). */
  events: number;
  /** Deliveries in flight: the worker's, the naive worker's and the bare loop's (BENCH_CONCURRENCY). */
  concurrency: number;
  /** Envelope bytes of every event (BENCH_PAYLOAD_BYTES). */
  payloadBytes: number;
  vendors: number;
  /** Events per ingest request, and jobs per naive addBulk. */
  batchSize: number;
  /** Concurrent producers (ingest requests, addBulk calls). */
  posters: number;
  /**
   * Deliveries before each measured run, so JIT, connections and caches are warm. As many as the
   * measured run by default: after 500, V8 still spent 2.7 s compiling Hookline's hot path inside a
   * 20,000-delivery run (about 130 µs a delivery on the compiler's threads, a cost a running server
   * pays once); after 20,000, 0.6 s of first compiles of rare paths.
   */
  warmup: number;
  /** Upper bound on waiting for a run's deliveries. */
  timeoutMs: number;
}

/** Deployments per vendor in throughput runs (the read model gets realistic, bounded writes). */
const DEPLOYMENTS_PER_VENDOR = 50;
/** Memory sampling period during measured runs. */
const RSS_SAMPLE_MS = 200;

export interface HooklineThroughput extends ThroughputFigures {
  /**
   * Accepted → visible in the lookups over the measured run, per projection entry (one ingest
   * request): the histogram bucket bounds (ms) that the median and the 99th percentile fall in, and
   * how many entries were projected.
   */
  readModelDelay: { p50UpToMs: number; p99UpToMs: number; entries: number };
  /** RSS of this process with the engine started and warm, just before the measured run. */
  rssBeforeBytes: number;
  /** RSS and heap of this process (API + worker + producers) while the run was measured. */
  rssMaxBytes: number;
  rssMedianBytes: number;
  heapUsedMaxBytes: number;
  /** How the measured run's delivery runs ended: `attempted:<outcome>`, `deferred:<reason>`, `skipped`, … */
  outcomes: Record<string, number>;
  /** The engine's Redis key prefix (where its hash tags, and so its slots, are). */
  prefix: string;
}

/** Counts finished delivery runs by kind (and outcome or reason). */
function outcomeCounter() {
  const counts: Record<string, number> = {};
  return {
    counts,
    onOutcome(o: FinishedOutcome) {
      const key =
        o.kind === 'attempted' ? `attempted:${o.outcome}` : o.kind === 'deferred' ? `deferred:${o.reason}` : o.kind;
      counts[key] = (counts[key] ?? 0) + 1;
    },
    reset() {
      for (const key of Object.keys(counts)) delete counts[key];
    },
  };
}

/** Something producers post batches of events to: Hookline's ingest API, or the lean pipeline's. */
interface Ingest {
  post(body: string, expected: number): Promise<unknown>;
}

/** Posts request bodies to `ingest`, `posters` requests in flight; answers when the first one went out. */
async function postBodies(
  ingest: Ingest,
  bodies: readonly { body: string; count: number }[],
  posters: number,
): Promise<number> {
  const startedAtMs = wallMs();
  await runParallel(bodies, posters, async ({ body, count }) => {
    await ingest.post(body, count);
  });
  return startedAtMs;
}

/** Posts `events` to `ingest`, `batchSize` to a request and `posters` requests in flight; answers when the first one went out. */
const postAll = (
  ingest: Ingest,
  events: readonly ProducerEvent[],
  setup: DeliveryBenchSetup,
  batchSize = setup.batchSize,
) => postBodies(ingest, batchBodies(events, batchSize), setup.posters);

/** Starts counting CPU time of this process and of Redis; `stop` answers the microseconds used since. */
export async function cpuMeter(
  redis: Redis,
): Promise<{ stop(): Promise<{ processUs: number; redisUs: number; redisCommands: number }> }> {
  const stats0 = process.env.BENCH_COMMANDSTATS ? await redisCommandStats(redis) : undefined;
  const writes = process.env.BENCH_WRITE_COSTS ? await writeCosts(redis) : undefined;
  const process0 = process.cpuUsage();
  const [redis0, commands0] = [await redisCpuUs(redis), await redisCommands(redis)];
  return {
    async stop() {
      const used = process.cpuUsage(process0);
      // The two INFO calls of stop() itself are left out.
      const [redisUs, commands] = [await redisCpuUs(redis), await redisCommands(redis)];
      if (stats0) printCommandStats(stats0, await redisCommandStats(redis));
      if (writes) printWriteCosts(await writes.stop());
      return { processUs: used.user + used.system, redisUs: redisUs - redis0, redisCommands: commands - commands0 - 2 };
    },
  };
}

/**
 * BENCH_COMMANDSTATS=1: each measured run also prints the commands Redis processed in it, per
 * command, and the bytes it read from clients (divide by the run's deliveries).
 */
function printCommandStats(
  before: Awaited<ReturnType<typeof redisCommandStats>>,
  after: Awaited<ReturnType<typeof redisCommandStats>>,
): void {
  const calls = [...after.calls]
    .map(
      ([command, n]) =>
        [
          command,
          n - (before.calls.get(command) ?? 0),
          (after.usec.get(command) ?? 0) - (before.usec.get(command) ?? 0),
        ] as const,
    )
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1]);
  console.log(
    `  Redis in this run: ${after.inputBytes - before.inputBytes} bytes read; calls (and µs in them) ` +
      calls.map(([c, n, us]) => `${c} ${n} (${us})`).join(', '),
  );
}

/**
 * BENCH_WRITE_COSTS=1: each measured run also prints what each write path cost Redis in it: calls
 * and µs per script (inner commands included) and per other command and key shape, from SLOWLOG at
 * a threshold of 0 (divide by the run's deliveries). The log's own cost makes the run slower.
 */
function printWriteCosts(costs: Map<string, { calls: number; us: number }>): void {
  const rows = [...costs].sort((a, b) => b[1].us - a[1].us);
  console.log(
    `  Redis's time per write in this run: ${rows.map(([what, { calls, us }]) => `${what} ${calls} calls ${us} µs`).join('; ')}`,
  );
}

function figures(
  deliveries: number,
  startedAtMs: number,
  lastAtMs: number,
  duplicates: number,
  cpu: { processUs: number; redisUs: number; redisCommands: number },
): ThroughputFigures {
  const seconds = (lastAtMs - startedAtMs) / 1000;
  return {
    deliveries,
    seconds,
    perSecond: deliveries / seconds,
    duplicates,
    processCpuUsPerDelivery: cpu.processUs / deliveries,
    redisCpuUsPerDelivery: cpu.redisUs / deliveries,
    redisCommandsPerDelivery: cpu.redisCommands / deliveries,
  };
}

/** A Hookline engine with `urls.length` vendors' webhooks (one per type of `workload`) on a fresh prefix and its worker running. */
async function startEngine(
  setup: DeliveryBenchSetup,
  run: ReceiverRun,
  urls: string[],
  worker: { deliveryTimeoutMs?: number; onOutcome?: (o: FinishedOutcome) => void } = {},
  config: Config = setup.config,
  workload?: Workload,
) {
  const engine = await BenchEngine.start({
    redisUrl: setup.redisUrl,
    config,
    apiConnections: setup.posters,
    worker: { concurrency: setup.concurrency, ...worker },
  });
  try {
    await engine.registerWebhooks(urls, run.secrets, workload?.eventTypes);
  } catch (error) {
    await engine.close();
    throw error;
  }
  return engine;
}

/** Called just before the measured events are posted, and once they are all delivered: e.g. to read counters over the measured run alone. */
export interface RunProbe {
  started(): Promise<void>;
  finished(): Promise<void>;
}

/**
 * Hookline end to end: `events` events POSTed to the ingest API in batches by a few concurrent
 * producers, delivered by the in-process worker, counted when the receiver has verified them all.
 * Rate = deliveries ÷ (first POST → last verified delivery), after a warm-up of its own. The events
 * are the e2e's deployment updates, one webhook each, unless `workload` says otherwise.
 */
export async function hooklineThroughput(
  setup: DeliveryBenchSetup,
  events = setup.events,
  { workload, probe }: { workload?: Workload; probe?: RunProbe } = {},
): Promise<HooklineThroughput> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors });
  const outcomes = outcomeCounter();
  const engine = await startEngine(
    setup,
    run,
    Array.from({ length: setup.vendors }, (_, i) => run.url(i)),
    { onOutcome: (o) => outcomes.onOutcome(o) },
    setup.config,
    workload,
  );
  try {
    const factory = workload ?? new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    const warmup = eventsFor(factory, setup.warmup, setup.vendors);
    await postAll(engine, warmup, setup);
    const warmupDeliveries = deliveredOf(factory, warmup);
    await run.waitVerified(warmupDeliveries, setup.timeoutMs, 'Hookline warm-up');
    outcomes.reset();

    const measured = eventsFor(factory, events, setup.vendors, setup.warmup);
    const deliveries = deliveredOf(factory, measured);
    // The producers' request bodies are made before the CPU meter starts: the platform's services make them.
    const bodies = batchBodies(measured, setup.batchSize);
    const rssBeforeBytes = process.memoryUsage().rss;
    const sampler = sampleProcessMemory(RSS_SAMPLE_MS);
    await probe?.started();
    const delays0 = await engine.readModelDelays();
    const cpu = await cpuMeter(setup.infoRedis);
    const startedAtMs = await postBodies(engine, bodies, setup.posters);
    const stats = await run.waitVerified(warmupDeliveries + deliveries, setup.timeoutMs, 'Hookline deliveries');
    const used = await cpu.stop();
    await probe?.finished();
    const readModelDelay = delayQuantiles(delays0, await engine.readModelDelays());
    const memory = sampler.stop();
    const rss = [...memory.rssBytes].sort((a, b) => a - b);
    return {
      ...figures(deliveries, startedAtMs, stats.lastAtMs, stats.duplicates, used),
      rssBeforeBytes,
      rssMaxBytes: rss.at(-1) ?? 0,
      rssMedianBytes: percentile(rss, 0.5),
      heapUsedMaxBytes: Math.max(...memory.heapUsedBytes),
      outcomes: { ...outcomes.counts },
      prefix: engine.prefix,
      readModelDelay,
    };
  } finally {
    await run.forget();
    await engine.close();
  }
}

/** The median's and the 99th percentile's bucket bounds (ms) of what a cumulative histogram counted between two reads. */
function delayQuantiles(
  before: ReadonlyMap<number, number>,
  after: ReadonlyMap<number, number>,
): HooklineThroughput['readModelDelay'] {
  const counted = [...after].map(([le, n]) => [le, n - (before.get(le) ?? 0)] as const).sort(([a], [b]) => a - b);
  const entries = counted.at(-1)?.[1] ?? 0;
  const upTo = (q: number) => (counted.find(([, n]) => n >= q * entries)?.[0] ?? Infinity) * 1_000;
  return { p50UpToMs: upTo(0.5), p99UpToMs: upTo(0.99), entries };
}

export interface SplitThroughput extends ThroughputFigures {
  /** CPU per delivery of the API process (this one: ingest API and producers) and of the worker process. */
  apiCpuUsPerDelivery: number;
  workerCpuUsPerDelivery: number;
  workerRssMaxBytes: number;
  workerEntry: string;
}

/**
 * Hookline as it is deployed: this process runs the ingest API (and the producers), a separate
 * `hookline worker` process delivers (`worker: 'process'`); or, the delivery-thread experiment, a
 * worker-role engine in a `worker_threads` thread of this process delivers (`worker: 'thread'`,
 * bench/delivery-thread.ts). The CPU figure adds both processes; a thread's CPU is this process's.
 */
export async function hooklineSplitThroughput(
  setup: DeliveryBenchSetup,
  worker: 'process' | 'thread' = 'process',
  events = setup.events,
): Promise<SplitThroughput> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors });
  const engine = await BenchEngine.start({
    redisUrl: setup.redisUrl,
    config: setup.config,
    apiConnections: setup.posters,
  });
  const label = worker === 'process' ? 'Hookline (API + worker process)' : 'Hookline (API + delivery thread)';
  try {
    await engine.registerWebhooks(
      Array.from({ length: setup.vendors }, (_, i) => run.url(i)),
      run.secrets,
    );
    const child =
      worker === 'process'
        ? await engine.startWorkerProcess({ concurrency: setup.concurrency })
        : await engine.startWorkerThread({ concurrency: setup.concurrency }).then(() => undefined);
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    await postAll(engine, eventsFor(factory, setup.warmup, setup.vendors), setup);
    await run.waitVerified(setup.warmup, setup.timeoutMs, `${label} warm-up`);

    const measured = eventsFor(factory, events, setup.vendors, setup.warmup);
    let workerRssMaxBytes = child?.rssBytes() ?? 0;
    const rssTimer = setInterval(
      () => (workerRssMaxBytes = Math.max(workerRssMaxBytes, child?.rssBytes() ?? 0)),
      RSS_SAMPLE_MS,
    );
    const worker0 = child?.cpuUs() ?? 0;
    const cpu = await cpuMeter(setup.infoRedis);
    const startedAtMs = await postAll(engine, measured, setup);
    const stats = await run.waitVerified(setup.warmup + events, setup.timeoutMs, `${label} deliveries`);
    const used = await cpu.stop();
    const workerUs = (child?.cpuUs() ?? 0) - worker0;
    clearInterval(rssTimer);
    return {
      ...figures(events, startedAtMs, stats.lastAtMs, stats.duplicates, {
        ...used,
        processUs: used.processUs + workerUs,
      }),
      apiCpuUsPerDelivery: used.processUs / events,
      workerCpuUsPerDelivery: workerUs / events,
      workerRssMaxBytes,
      workerEntry: child?.entry ?? 'a worker_threads thread',
    };
  } finally {
    await run.forget();
    await engine.close();
  }
}

/** The naive BullMQ baseline: same Redis, receiver, payload size, concurrency, batch size and producers. */
export async function naiveThroughput(setup: DeliveryBenchSetup): Promise<ThroughputFigures> {
  const run = await setup.receiver.newRun({ scheme: 'legacy', targets: setup.vendors });
  const factory = new EventFactory(setup.payloadBytes);
  const body = factory.envelopeOf(factory.event(0, 0));
  const naive = new NaiveBaseline(setup.redisUrl, run, {
    concurrency: setup.concurrency,
    targets: setup.vendors,
    body,
    batchSize: setup.batchSize,
    adders: setup.posters,
  });
  try {
    await naive.add(setup.warmup);
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'naive warm-up');
    const cpu = await cpuMeter(setup.infoRedis);
    const startedAtMs = await naive.add(setup.events);
    const stats = await run.waitVerified(setup.warmup + setup.events, setup.timeoutMs, 'naive deliveries');
    return figures(setup.events, startedAtMs, stats.lastAtMs, stats.duplicates, await cpu.stop());
  } finally {
    await run.forget();
    await naive.close();
  }
}

/** Events per request to the lean pipeline: the batch the issue measured it with. */
export const LEAN_BATCH_SIZE = 100;

/**
 * The lean pipeline (bench/lean.ts): same Redis, receiver (Standard Webhooks, as Hookline signs),
 * events, concurrency and producers as Hookline's e2e, the producers posting 100 events a request.
 */
export async function leanThroughput(
  setup: DeliveryBenchSetup,
  { probe }: { probe?: RunProbe } = {},
): Promise<ThroughputFigures> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors });
  const lean = await LeanPipeline.start({
    redisUrl: setup.redisUrl,
    prefix: `bench-lean-${randomBytes(4).toString('hex')}`,
    eventType: BENCH_EVENT_TYPE,
    webhooks: Array.from({ length: setup.vendors }, (_, i) => ({
      vendorId: vendorId(i),
      url: run.url(i),
      secret: run.secrets[i]!,
    })),
    inFlight: setup.concurrency,
    producerConnections: setup.posters,
  });
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    await postAll(lean, eventsFor(factory, setup.warmup, setup.vendors), setup, LEAN_BATCH_SIZE);
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'lean warm-up');
    const bodies = batchBodies(eventsFor(factory, setup.events, setup.vendors, setup.warmup), LEAN_BATCH_SIZE);
    await probe?.started();
    const cpu = await cpuMeter(setup.infoRedis);
    const startedAtMs = await postBodies(lean, bodies, setup.posters);
    const stats = await run.waitVerified(setup.warmup + setup.events, setup.timeoutMs, 'lean deliveries');
    const used = await cpu.stop();
    await probe?.finished();
    return figures(setup.events, startedAtMs, stats.lastAtMs, stats.duplicates, used);
  } finally {
    await run.forget();
    await lean.close();
    await deleteKeys(setup.infoRedis, lean.keyPattern);
  }
}

/** Warms the receiver process up (JIT, connections) with `count` bare requests, before any measured run. */
export async function warmReceiver(setup: DeliveryBenchSetup, count: number): Promise<void> {
  const run = await setup.receiver.newRun({ scheme: 'legacy', targets: setup.vendors });
  const factory = new EventFactory(setup.payloadBytes);
  try {
    await bareUndiciLoop(run, {
      concurrency: setup.concurrency,
      targets: setup.vendors,
      body: factory.envelopeOf(factory.event(0, 0)),
      count,
      firstId: 0,
    });
    await run.waitVerified(count, setup.timeoutMs, 'receiver warm-up');
  } finally {
    await run.forget();
  }
}

/** C concurrent undici loops POSTing the same signed body: the ceiling of this receiver and machine. */
export async function bareThroughput(setup: DeliveryBenchSetup): Promise<ThroughputFigures> {
  const run = await setup.receiver.newRun({ scheme: 'legacy', targets: setup.vendors });
  const factory = new EventFactory(setup.payloadBytes);
  const body = factory.envelopeOf(factory.event(0, 0));
  const common = { concurrency: setup.concurrency, targets: setup.vendors, body };
  try {
    await bareUndiciLoop(run, { ...common, count: setup.warmup, firstId: 0 });
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'bare warm-up');
    const cpu = await cpuMeter(setup.infoRedis);
    const startedAtMs = await bareUndiciLoop(run, { ...common, count: setup.events, firstId: setup.warmup });
    const stats = await run.waitVerified(setup.warmup + setup.events, setup.timeoutMs, 'bare deliveries');
    return figures(setup.events, startedAtMs, stats.lastAtMs, stats.duplicates, await cpu.stop());
  } finally {
    await run.forget();
  }
}

/**
 * Posts one batch every `tickMs` (`ticks` of them, batch k from `batchAt(k)`, made when it is due, so
 * a long run holds no more than it sends) at a fixed schedule, at most `inFlightMax` requests
 * outstanding; a late tick is sent at once. Answers each batch's send and 202 times.
 */
export async function pacedPosts(
  engine: BenchEngine,
  ticks: number,
  batchAt: (k: number) => { body: string; count: number },
  tickMs: number,
  inFlightMax = 16,
): Promise<PostResult[]> {
  const results: PostResult[] = new Array<PostResult>(ticks);
  const inFlight = new Set<Promise<void>>();
  const startMs = wallMs();
  for (let k = 0; k < ticks; k += 1) {
    const dueInMs = startMs + k * tickMs - wallMs();
    if (dueInMs > 0) await sleep(dueInMs);
    while (inFlight.size >= inFlightMax) await Promise.race(inFlight);
    const batch = batchAt(k);
    const sending: Promise<void> = engine.post(batch.body, batch.count).then((result) => {
      results[k] = result;
      inFlight.delete(sending);
    });
    inFlight.add(sending);
  }
  await Promise.all(inFlight);
  return results;
}

export interface LatencyFigures {
  /** Offered rate, events/s. */
  targetPerSecond: number;
  achievedPerSecond: number;
  events: number;
  seconds: number;
  /** 202 received by the producer → verified at the receiver. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** POST sent → verified at the receiver (includes ingest). */
  postedP50Ms: number;
  postedP99Ms: number;
}

/** Paced batches of events at `perSecond` for `seconds`: one batch per tick. */
function pacedBatches(
  factory: EventFactory,
  perSecond: number,
  seconds: number,
  vendors: number,
  first: number,
  tickMs: number,
) {
  const perTick = Math.max(1, Math.round((perSecond * tickMs) / 1000));
  const ticks = Math.max(1, Math.round((seconds * 1000) / tickMs));
  const events = eventsFor(factory, perTick * ticks, vendors, first);
  return { events, batches: batchBodies(events, perTick), perTick, ticks };
}

/** Accepted → received latency at a fixed offered rate (about half of the measured maximum). */
export async function hooklineLatency(
  setup: DeliveryBenchSetup,
  perSecond: number,
  seconds: number,
  tickMs = 50,
): Promise<LatencyFigures> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors, recordTimes: true });
  // The engine's own acceptance time of each event (taken when ingest accepted its batch, before the
  // 202 is sent), as the worker saw it.
  const acceptedAt = new Map<string, number>();
  const onOutcome = (o: FinishedOutcome) => {
    if (o.kind === 'attempted') acceptedAt.set(o.job.eventId, o.job.acceptedAtMs);
  };
  const engine = await startEngine(
    setup,
    run,
    Array.from({ length: setup.vendors }, (_, i) => run.url(i)),
    { onOutcome },
  );
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    await postAll(engine, eventsFor(factory, setup.warmup, setup.vendors), setup);
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'latency warm-up');

    const { events, batches, perTick } = pacedBatches(factory, perSecond, seconds, setup.vendors, setup.warmup, tickMs);
    const posted = await pacedPosts(engine, batches.length, (k) => batches[k]!, tickMs);
    await run.waitVerified(setup.warmup + events.length, setup.timeoutMs, 'paced deliveries');
    // The receiver has every event; the worker reports an attempt only once it is recorded, a moment later.
    await waitUntil(
      async () => events.every((e) => acceptedAt.has(e.event_id)) || undefined,
      setup.timeoutMs,
      'the attempts recorded',
      10,
    );
    const { ids, atMs } = await run.times();
    const receivedAt = new Map(ids.map((id, i) => [id, atMs[i]!]));
    const fromAccepted: number[] = [];
    const fromPosted: number[] = [];
    events.forEach((event, i) => {
      const post = posted[Math.floor(i / perTick)]!;
      const received = receivedAt.get(event.event_id);
      const accepted = acceptedAt.get(event.event_id);
      if (received === undefined || accepted === undefined) throw new Error(`event ${event.event_id} was not received`);
      fromAccepted.push(received - accepted);
      fromPosted.push(received - post.sentAtMs);
    });
    fromAccepted.sort((a, b) => a - b);
    fromPosted.sort((a, b) => a - b);
    const sendSeconds = (posted.at(-1)!.sentAtMs - posted[0]!.sentAtMs) / 1000 + tickMs / 1000;
    return {
      targetPerSecond: perSecond,
      achievedPerSecond: events.length / sendSeconds,
      events: events.length,
      seconds: sendSeconds,
      p50Ms: percentile(fromAccepted, 0.5),
      p99Ms: percentile(fromAccepted, 0.99),
      maxMs: fromAccepted.at(-1) ?? 0,
      postedP50Ms: percentile(fromPosted, 0.5),
      postedP99Ms: percentile(fromPosted, 0.99),
    };
  } finally {
    await run.forget();
    await engine.close();
  }
}

export interface IsolationFigures {
  healthy: number;
  hanging: number;
  hangingWebhooks: number;
  seconds: number;
  healthyPerSecond: number;
  /** Requests that reached a hanging endpoint (each held a worker slot until the timeout). */
  hangingAttempts: number;
  /** Deliveries put back without an attempt, by reason (open circuit, probe in flight, slow endpoint). */
  deferred: Record<string, number>;
  timeouts: number;
  deliveryTimeoutMs: number;
}

/**
 * Every fifth vendor's webhook (20 %) points at its own receiver port (its own origin, as a separate
 * vendor host would be) whose requests are accepted and never answered. Events are spread evenly over
 * all vendors; the figure is the healthy deliveries' rate, first POST → last healthy delivery verified.
 */
export async function hooklineIsolation(
  setup: DeliveryBenchSetup,
  deliveryTimeoutMs: number,
): Promise<IsolationFigures> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: setup.vendors });
  const isHanging = (vendor: number) => vendor % 5 === 4;
  const hangingVendors = Array.from({ length: setup.vendors }, (_, i) => i).filter(isHanging);
  const healthyVendors = Array.from({ length: setup.vendors }, (_, i) => i).filter((i) => !isHanging(i));
  const ports = await setup.receiver.listen(hangingVendors.length);
  await run.hangAll();
  const urls = Array.from({ length: setup.vendors }, (_, i) =>
    isHanging(i) ? run.hangingUrl(i, ports[hangingVendors.indexOf(i)]!) : run.url(i),
  );
  const deferred: Record<string, number> = {};
  let timeouts = 0;
  const onOutcome = (outcome: FinishedOutcome) => {
    if (outcome.kind === 'deferred') deferred[outcome.reason] = (deferred[outcome.reason] ?? 0) + 1;
    else if (outcome.kind === 'attempted' && outcome.outcome === 'timeout') timeouts += 1;
  };
  const engine = await startEngine(setup, run, urls, { deliveryTimeoutMs, onOutcome });
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    // Warm up on healthy webhooks only, so the measured run starts with no endpoint known to be bad.
    await postAll(
      engine,
      eventsFor(factory, setup.warmup, setup.vendors, 0, (n) => healthyVendors[n % healthyVendors.length]!),
      setup,
    );
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'isolation warm-up');
    for (const key of Object.keys(deferred)) delete deferred[key];
    timeouts = 0;
    const before = await run.stats();

    const measured = eventsFor(factory, setup.events, setup.vendors, setup.warmup);
    const healthy = measured.filter((_, i) => !isHanging((setup.warmup + i) % setup.vendors)).length;
    const startedAtMs = await postAll(engine, measured, setup);
    const stats = await run.waitVerified(
      setup.warmup + healthy,
      setup.timeoutMs,
      'healthy deliveries beside hanging endpoints',
    );
    const seconds = (stats.lastAtMs - startedAtMs) / 1000;
    return {
      healthy,
      hanging: setup.events - healthy,
      hangingWebhooks: hangingVendors.length,
      seconds,
      healthyPerSecond: healthy / seconds,
      hangingAttempts: stats.hung - before.hung,
      deferred: { ...deferred },
      timeouts,
      deliveryTimeoutMs,
    };
  } finally {
    // Abort the held requests first, so the worker's in-flight attempts end at once.
    await run.forget();
    await engine.close(0);
  }
}

/** How long the receiver takes to answer the first request of the first-contact burst. */
const FIRST_ANSWER_DELAY_MS = 500;

export interface FirstContactFigures {
  events: number;
  seconds: number;
  perSecond: number;
  /** Deliveries deferred behind the receiver's first contact (woken when it answered). */
  deferred: number;
  /** Accepted by ingest → received. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** The longest pause between two consecutive receptions. */
  longestGapMs: number;
}

/**
 * A burst to a healthy receiver that a fresh engine has never contacted: every webhook on one
 * receiver, no warm-up, `events` posted in batches by the producers, and the receiver's first answer
 * 500 ms late. The first attempt goes alone and the rest wait for its answer; the figures show
 * whether they went out as soon as it came.
 */
export async function hooklineFirstContact(
  setup: DeliveryBenchSetup,
  events = setup.events,
): Promise<FirstContactFigures> {
  // The first answer takes longer than a batch waits for it (250 ms), as it did when the engine was
  // busy ingesting the burst: the rest of the burst is deferred, and must go out when it comes.
  const run = await setup.receiver.newRun({
    scheme: 'standard',
    targets: setup.vendors,
    recordTimes: true,
    firstAnswerDelayMs: FIRST_ANSWER_DELAY_MS,
  });
  const acceptedAt = new Map<string, number>();
  let deferred = 0;
  const onOutcome = (o: FinishedOutcome) => {
    if (o.kind === 'attempted') acceptedAt.set(o.job.eventId, o.job.acceptedAtMs);
    else if (o.kind === 'deferred') deferred += 1;
  };
  const engine = await startEngine(
    setup,
    run,
    Array.from({ length: setup.vendors }, (_, i) => run.url(i)),
    { onOutcome },
  );
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    const measured = eventsFor(factory, events, setup.vendors);
    const startedAtMs = await postAll(engine, measured, setup);
    const stats = await run.waitVerified(events, setup.timeoutMs, 'first-contact burst');
    const { ids, atMs } = await run.times();
    const latency = ids.map((id, i) => atMs[i]! - (acceptedAt.get(id) ?? atMs[i]!)).sort((a, b) => a - b);
    const received = [...atMs].sort((a, b) => a - b);
    const longestGapMs = received.slice(1).reduce((gap, at, i) => Math.max(gap, at - received[i]!), 0);
    const seconds = (stats.lastAtMs - startedAtMs) / 1000;
    return {
      events,
      seconds,
      perSecond: events / seconds,
      deferred,
      p50Ms: percentile(latency, 0.5),
      p99Ms: percentile(latency, 0.99),
      maxMs: latency.at(-1) ?? 0,
      longestGapMs,
    };
  } finally {
    await run.forget();
    await engine.close();
  }
}

export interface FlakyFigures {
  events: number;
  receivers: number;
  failRate: number;
  hangRate: number;
  /** First POST → the last event verified (every event delivered). */
  seconds: number;
  /** Events verified (all of them unless the wait ran out). */
  delivered: number;
  circuitsOpened: number;
  /** Attempts recorded as circuit_open (due while a circuit was open; not sent). */
  circuitOpenAttempts: number;
  timeouts: number;
  refused: number;
  deliveryTimeoutMs: number;
  retrySchedule: string;
}

/** Retries soon enough to finish in minutes, and enough of them that no event runs out (0.27^12 ≈ 1e-7). */
const FLAKY_SCHEDULE_MS = [0, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000, 15_000, 15_000, 15_000, 15_000];

/**
 * Mostly healthy receivers with bad moments: `receivers` origins, each answering 500 to a quarter of
 * the requests and never answering 2 % of them. The figure is how long every event takes to be
 * delivered, and how often a circuit opened on receivers that were never down.
 */
export async function hooklineFlaky(
  setup: DeliveryBenchSetup,
  options: {
    events: number;
    receivers: number;
    deliveryTimeoutMs: number;
    /** How long to wait for every event at most; past it the figures say how many arrived. */
    waitMs: number;
  },
): Promise<FlakyFigures> {
  const failRate = 0.25;
  const hangRate = 0.02;
  const run = await setup.receiver.newRun({
    scheme: 'standard',
    targets: options.receivers,
    faults: { failRate, hangRate },
  });
  const ports = await setup.receiver.listen(options.receivers);
  let circuitOpenAttempts = 0;
  let timeouts = 0;
  const onOutcome = (o: FinishedOutcome) => {
    if (o.kind !== 'attempted') return;
    if (o.outcome === 'circuit_open') circuitOpenAttempts += 1;
    else if (o.outcome === 'timeout') timeouts += 1;
  };
  const config = { ...setup.config, retryScheduleMs: FLAKY_SCHEDULE_MS };
  const urls = Array.from({ length: options.receivers }, (_, i) => run.url(i, ports[i]));
  const engine = await startEngine(
    setup,
    run,
    urls,
    { deliveryTimeoutMs: options.deliveryTimeoutMs, onOutcome },
    config,
  );
  const opened0 = await BenchEngine.circuitsOpened();
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    const startedAtMs = await postAll(engine, eventsFor(factory, options.events, options.receivers), setup);
    let stats = await run.stats();
    try {
      stats = await run.waitVerified(options.events, options.waitMs, 'flaky receivers');
    } catch {
      stats = await run.stats();
    }
    return {
      events: options.events,
      receivers: options.receivers,
      failRate,
      hangRate,
      seconds: (stats.lastAtMs - startedAtMs) / 1000,
      delivered: stats.verified,
      circuitsOpened: (await BenchEngine.circuitsOpened()) - opened0,
      circuitOpenAttempts,
      timeouts,
      refused: stats.refused,
      deliveryTimeoutMs: options.deliveryTimeoutMs,
      retrySchedule: FLAKY_SCHEDULE_MS.map((ms) => `${ms / 1000}s`).join(','),
    };
  } finally {
    await run.forget();
    await engine.close(0);
  }
}

export interface AimdFigures {
  /** Deliveries to the receiver with a capacity, and to the healthy ones beside it. */
  limited: number;
  healthy: number;
  capacity: number;
  latencyMs: number;
  warmUpMs: number;
  /** Attempts that reached the limited receiver after its warm-up, and how many of them got 429. */
  lateAttempts: number;
  late429: number;
  /** Over the whole run. */
  attempts: number;
  all429: number;
  /** Deliveries per second to the limited receiver from its warm-up to 90 % of them (the rest wait on retries of 429s). */
  steadyPerSecond: number;
  /** What the receiver can take: capacity ÷ latency. */
  idealPerSecond: number;
  mostInflight: number;
  /** Healthy deliveries per second, first POST to the last healthy one verified. */
  healthyPerSecond: number;
  deferred: Record<string, number>;
  /** Deliveries (warm-up included) verified at the receiver, and dead-lettered by the engine, of `total`. */
  verified: number;
  deadLettered: number;
  total: number;
}

/** Retries of the AIMD scenario: its 429'd deliveries come back within the run, not after the default 5 min. */
const AIMD_RETRY_SCHEDULE_MS = [0, 1_000, 2_000, 5_000, 10_000];

/**
 * Adaptive concurrency: every fifth vendor's webhook points at a receiver of its own origin that
 * takes `capacity` requests at once, answering each after `latencyMs`, and answers 429 at once above
 * that; the others point at the healthy receiver. Reports the share of 429s after the first
 * seconds, the limited receiver's throughput against capacity ÷ latency, and the healthy webhooks'
 * throughput beside it.
 */
export async function hooklineAimd(
  setup: DeliveryBenchSetup,
  capacity = 8,
  latencyMs = 50,
  warmUpMs = 3_000,
): Promise<AimdFigures> {
  const isLimited = (vendor: number) => vendor % 5 === 4;
  const [port] = await setup.receiver.listen(1);
  const run = await setup.receiver.newRun({
    scheme: 'standard',
    targets: setup.vendors,
    capacity: { port: port!, inflight: capacity, latencyMs, warmUpMs },
  });
  const urls = Array.from({ length: setup.vendors }, (_, i) => (isLimited(i) ? run.url(i, port) : run.url(i)));
  const deferred: Record<string, number> = {};
  // A delivery that ran out of attempts on 429s never reaches the receiver: it is counted here, so the
  // run ends with it in the figures instead of waiting for it until the timeout.
  let deadLettered = 0;
  const onOutcome = (outcome: FinishedOutcome) => {
    if (outcome.kind === 'deferred') deferred[outcome.reason] = (deferred[outcome.reason] ?? 0) + 1;
    else if (outcome.kind === 'attempted' && (outcome.decision === 'dead' || outcome.decision === 'disable'))
      deadLettered += 1;
  };
  const engine = await startEngine(
    setup,
    run,
    urls,
    { onOutcome },
    { ...setup.config, retryScheduleMs: AIMD_RETRY_SCHEDULE_MS },
  );
  try {
    const factory = new EventFactory(setup.payloadBytes, DEPLOYMENTS_PER_VENDOR);
    // Warm up on the healthy webhooks only, as the all-healthy rate it is held against was.
    const healthyVendors = Array.from({ length: setup.vendors }, (_, i) => i).filter((i) => !isLimited(i));
    await postAll(
      engine,
      eventsFor(factory, setup.warmup, setup.vendors, 0, (n) => healthyVendors[n % healthyVendors.length]!),
      setup,
    );
    await run.waitVerified(setup.warmup, setup.timeoutMs, 'adaptive concurrency warm-up');
    const measured = eventsFor(factory, setup.events, setup.vendors, setup.warmup);
    const limited = measured.filter((_, i) => isLimited((setup.warmup + i) % setup.vendors)).length;
    const startedAtMs = await postAll(engine, measured, setup);
    const total = setup.warmup + setup.events;
    let stats = await run.stats();
    try {
      stats = await run.waitVerified(
        total,
        setup.timeoutMs + (limited * latencyMs) / capacity,
        'deliveries beside a receiver at its capacity',
        () => deadLettered,
      );
    } catch (error) {
      // Some never finished: the figures say how many arrived. A failed signature is no figure.
      stats = await run.stats();
      if (stats.failed > 0) throw error;
    }
    const seen = stats.capacity!;
    const steadyFromMs = seen.firstAtMs + warmUpMs;
    const steadyToMs = seen.acceptedAtMs[Math.floor(seen.acceptedAtMs.length * 0.9)] ?? seen.lastAcceptedAtMs;
    const steady = seen.acceptedAtMs.filter((atMs) => atMs >= steadyFromMs && atMs < steadyToMs).length;
    return {
      limited,
      healthy: setup.events - limited,
      capacity,
      latencyMs,
      warmUpMs,
      lateAttempts: seen.lateAccepted + seen.lateThrottled,
      late429: seen.lateThrottled,
      attempts: seen.accepted + seen.throttled,
      all429: seen.throttled,
      steadyPerSecond: steadyToMs > steadyFromMs ? steady / ((steadyToMs - steadyFromMs) / 1000) : 0,
      idealPerSecond: capacity / (latencyMs / 1000),
      mostInflight: seen.mostInflight,
      healthyPerSecond: (setup.events - limited) / ((seen.othersLastAtMs - startedAtMs) / 1000),
      deferred: { ...deferred },
      verified: stats.verified,
      deadLettered,
      total,
    };
  } finally {
    await run.forget();
    await engine.close(0);
  }
}
