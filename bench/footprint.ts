import { collectGarbage, percentile, slope, sleep, wallMs } from './measure.js';
import { pacedPosts, type DeliveryBenchSetup } from './delivery.js';
import { BenchEngine } from './engine.js';
import { keyBreakdown, keyBytes, patternBytes, redisMemory } from './redis-info.js';
import { batchBodies, EventFactory, eventsFor, runParallel } from './workload.js';

export interface PendingFootprint {
  pending: number;
  payloadBytes: number;
  /** (used_memory after − before) ÷ pending − payload. */
  overheadBytesPerDelivery: number;
  /** The same, with Redis's client buffers left out. */
  overheadBytesPerDeliveryNoClients: number;
  /** MEMORY USAGE of the first-attempt streams per pending delivery in them, minus the payload. */
  streamOverheadBytes: number;
  /** MEMORY USAGE of the dedupe marks' keys ÷ the event ids marked (their share of each packed set). */
  dedupeMarkBytes: number;
  /** Growth of the BullMQ queues' keys (wait lists, event streams: first attempts add none), per pending delivery. */
  queueBytesPerDelivery: number;
  /**
   * Growth of the webhooks' event logs per delivery, the payload's copy included: kept for the
   * retention whether the delivery is pending or done, so apart from the pending overhead.
   */
  eventLogBytesPerDelivery: number;
}

/** Lets Redis release idle client buffers before a memory reading. */
const SETTLE_MS = 1_500;

/**
 * Redis bytes per pending delivery beyond the payload: no worker runs, `pending` events are ingested
 * through the API (one webhook each, one deployment per vendor so the read model stays constant), and
 * INFO used_memory is compared before and after.
 */
export async function pendingFootprint(setup: DeliveryBenchSetup, pending: number): Promise<PendingFootprint> {
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
    const factory = new EventFactory(setup.payloadBytes, 1);
    const post = (events: ReturnType<typeof eventsFor>) =>
      runParallel(batchBodies(events, 1_000), setup.posters, async ({ body, count }) => {
        await engine.post(body, count);
      });
    // The first events create the queues' fixed keys and every vendor's read-model document.
    await post(eventsFor(factory, Math.max(setup.vendors, 200), setup.vendors));
    const measured = eventsFor(factory, pending, setup.vendors, 1_000_000);
    const bodies = batchBodies(measured, 1_000);
    const { prefix } = engine;
    const partitions = Array.from({ length: setup.config.queuePartitions }, (_, n) => n);
    const queueBytes = async () => (await patternBytes(engine.redis, `{${prefix}:q*}:deliveries:*`)).bytes;
    const logBytes = async () => (await patternBytes(engine.redis, `{${prefix}:wh:*}:log*`)).bytes;
    const streamBytes = async () => {
      let total = 0;
      for (const n of partitions) total += await keyBytes(engine.redis, engine.stores.keys.firstAttempts.streamOf(n));
      return total;
    };
    await sleep(SETTLE_MS);
    const before = await redisMemory(engine.redis);
    const [queuesBefore, streamsBefore, logBefore] = [await queueBytes(), await streamBytes(), await logBytes()];
    await runParallel(bodies, setup.posters, async ({ body, count }) => {
      await engine.post(body, count);
    });
    await sleep(SETTLE_MS);
    const after = await redisMemory(engine.redis);
    const [queuesAfter, streamsAfter, logAfter] = [await queueBytes(), await streamBytes(), await logBytes()];
    const logGrowth = logAfter - logBefore;
    const marked = Math.max(setup.vendors, 200) + pending;
    const perDelivery = (used: number) => used / pending - factory.envelopeBytes;
    return {
      pending,
      payloadBytes: factory.envelopeBytes,
      overheadBytesPerDelivery: perDelivery(after.usedBytes - before.usedBytes - logGrowth),
      overheadBytesPerDeliveryNoClients: perDelivery(
        after.usedBytes - after.clientsBytes - (before.usedBytes - before.clientsBytes) - logGrowth,
      ),
      eventLogBytesPerDelivery: logGrowth / pending,
      streamOverheadBytes: (streamsAfter - streamsBefore) / pending - factory.envelopeBytes,
      dedupeMarkBytes: (await patternBytes(engine.redis, `{${prefix}:dd*`)).bytes / marked,
      queueBytesPerDelivery: (queuesAfter - queuesBefore) / pending,
    };
  } finally {
    await engine.close();
  }
}

interface SoakSample {
  atSeconds: number;
  /** INFO used_memory without the client buffers (which swing with each burst of commands). */
  redisUsedBytes: number;
  rssBytes: number;
  /** RSS of the `hookline worker` process doing the deliveries. */
  workerRssBytes: number;
  /** Heap in use right after a full garbage collection: what the process retains. */
  retainedHeapBytes: number;
  delivered: number;
}

export interface SoakFigures {
  seconds: number;
  webhooks: number;
  perSecond: number;
  delivered: number;
  samples: SoakSample[];
  redisFirstBytes: number;
  redisLastBytes: number;
  redisMaxBytes: number;
  /** Least-squares slope of used_memory over the soak. */
  redisSlopeBytesPerMinute: number;
  /** Redis growth ÷ deliveries made meanwhile: what each delivery leaves behind. */
  redisGrowthBytesPerDelivery: number;
  rssFirstBytes: number;
  rssLastBytes: number;
  rssMaxBytes: number;
  rssSlopeBytesPerMinute: number;
  /** The separate `hookline worker` process: how it was started and its RSS over the soak. */
  workerEntry: string;
  workerRssFirstBytes: number;
  workerRssLastBytes: number;
  workerRssMaxBytes: number;
  /** Median over the soak's samples: the steady-load figure (the max often comes from the prefill burst). */
  workerRssMedianBytes: number;
  workerRssSlopeBytesPerMinute: number;
  retainedHeapFirstBytes: number;
  retainedHeapLastBytes: number;
  retainedHeapSlopeBytesPerMinute: number;
  /** The most delivery records the log promises to keep (the key breakdown counts those kept). */
  deliveryRecordsCap: number;
  dedupeMarkBytes: number;
  /** MEMORY USAGE of one status tombstone (a finished record that fell off its webhook's recent list). */
  tombstoneBytes: number;
  /**
   * The steady part of the soak: from `steadyAfterSeconds` (once every bounded structure is full:
   * the logs at their caps, the tombstones at their 5-minute grace) to the end.
   */
  steady: SteadyWindow;
}

interface SteadyWindow {
  fromSeconds: number;
  toSeconds: number;
  delivered: number;
  /** Least-squares slopes over the window's samples. */
  redisSlopeBytesPerMinute: number;
  workerRssSlopeBytesPerMinute: number;
  /** used_memory (client buffers left out) growth ÷ deliveries in the window. */
  redisGrowthBytesPerDelivery: number;
  /** Each category of keys at the window's start and end (count, MEMORY USAGE) and its growth per delivery. */
  categories: Record<
    string,
    { keysFrom: number; keysTo: number; bytesFrom: number; bytesTo: number; bytesPerDelivery: number }
  >;
  /** Growth not in any key (Redis's own tables, allocator): used_memory growth − the keys' growth, per delivery. */
  unattributedBytesPerDelivery: number;
}

/** Deliveries each webhook's log keeps (DEFAULT_DELIVERY_LOG_OPTIONS.recentPerWebhook). */
const RECENT_PER_WEBHOOK = 1_000;

/**
 * A long steady run with a real `hookline worker` process doing the deliveries (this process runs
 * the API and the producers): first every webhook's delivery log is filled to its cap (so from then
 * on a bounded log stops growing), then events are posted at `perSecond` for `seconds` while Redis
 * used_memory, the worker's RSS, this process's RSS and its heap after a full collection are
 * sampled every `sampleMs`.
 */
export async function soak(
  setup: DeliveryBenchSetup,
  options: { seconds: number; perSecond: number; webhooks: number; sampleMs: number; steadyAfterSeconds: number },
): Promise<SoakFigures> {
  const run = await setup.receiver.newRun({ scheme: 'standard', targets: options.webhooks });
  const engine = await BenchEngine.start({
    redisUrl: setup.redisUrl,
    config: setup.config,
    apiConnections: setup.posters,
  });
  try {
    await engine.registerWebhooks(
      Array.from({ length: options.webhooks }, (_, i) => run.url(i)),
      run.secrets,
    );
    const worker = await engine.startWorkerProcess({ concurrency: setup.concurrency });
    const factory = new EventFactory(setup.payloadBytes, 50);
    const prefill = options.webhooks * RECENT_PER_WEBHOOK + setup.warmup;
    await runParallel(
      batchBodies(eventsFor(factory, prefill, options.webhooks), setup.batchSize),
      setup.posters,
      async ({ body, count }) => {
        await engine.post(body, count);
      },
    );
    await run.waitVerified(prefill, setup.timeoutMs, 'soak prefill');

    const tickMs = 50;
    const perTick = Math.max(1, Math.round((options.perSecond * tickMs) / 1000));
    const ticks = Math.max(1, Math.round((options.seconds * 1000) / tickMs));
    // Each tick's events are made when it is due: a 30-minute soak holds none of the others.
    const batchAt = (k: number) =>
      batchBodies(eventsFor(factory, perTick, options.webhooks, prefill + k * perTick), perTick)[0]!;
    const samples: SoakSample[] = [];
    await sleep(SETTLE_MS);
    const startMs = wallMs();
    const sample = async () => {
      const [memory, stats] = await Promise.all([redisMemory(engine.redis), run.stats()]);
      const rssBytes = process.memoryUsage().rss;
      collectGarbage();
      const retainedHeapBytes = process.memoryUsage().heapUsed;
      samples.push({
        atSeconds: (wallMs() - startMs) / 1000,
        redisUsedBytes: memory.usedBytes - memory.clientsBytes,
        rssBytes,
        workerRssBytes: worker.rssBytes(),
        retainedHeapBytes,
        delivered: stats.verified,
      });
    };
    await sample();
    // The steady window's start: its key breakdown is taken once, with the first sample past it.
    let steadyFrom:
      | { atSeconds: number; delivered: number; usedBytes: number; keys: Awaited<ReturnType<typeof keyBreakdown>> }
      | undefined;
    const markSteady = async () => {
      const atSeconds = (wallMs() - startMs) / 1000;
      const [memory, stats] = await Promise.all([redisMemory(engine.redis), run.stats()]);
      steadyFrom = {
        atSeconds,
        delivered: stats.verified,
        usedBytes: memory.usedBytes - memory.clientsBytes,
        keys: await keyBreakdown(engine.redis, engine.prefix),
      };
    };
    if (options.steadyAfterSeconds <= 0) await markSteady();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        await sleep(options.sampleMs);
        if (!sampling) break;
        await sample();
        if (steadyFrom === undefined && samples.at(-1)!.atSeconds >= options.steadyAfterSeconds) await markSteady();
      }
    })();
    try {
      await pacedPosts(engine, ticks, batchAt, tickMs);
      await run.waitVerified(prefill + perTick * ticks, setup.timeoutMs, 'soak deliveries');
    } finally {
      sampling = false;
      await sampler;
    }
    await sleep(SETTLE_MS);
    await sample();
    if (steadyFrom === undefined) await markSteady();
    const endKeys = await keyBreakdown(engine.redis, engine.prefix);

    const first = samples[0]!;
    const last = samples.at(-1)!;
    const from = steadyFrom!;
    const window = samples.filter((s) => s.atSeconds >= from.atSeconds);
    const windowSlope = (pick: (s: SoakSample) => number) =>
      slope(window.map((s) => ({ x: s.atSeconds / 60, y: pick(s) })));
    const windowDelivered = Math.max(1, last.delivered - from.delivered);
    const categories: SteadyWindow['categories'] = {};
    let keysGrowth = 0;
    for (const name of new Set([...Object.keys(from.keys), ...Object.keys(endKeys)])) {
      const a = from.keys[name] ?? { keys: 0, bytes: 0 };
      const b = endKeys[name] ?? { keys: 0, bytes: 0 };
      keysGrowth += b.bytes - a.bytes;
      categories[name] = {
        keysFrom: a.keys,
        keysTo: b.keys,
        bytesFrom: a.bytes,
        bytesTo: b.bytes,
        bytesPerDelivery: (b.bytes - a.bytes) / windowDelivered,
      };
    }
    const steady: SteadyWindow = {
      fromSeconds: from.atSeconds,
      toSeconds: last.atSeconds,
      delivered: last.delivered - from.delivered,
      redisSlopeBytesPerMinute: windowSlope((s) => s.redisUsedBytes),
      workerRssSlopeBytesPerMinute: windowSlope((s) => s.workerRssBytes),
      redisGrowthBytesPerDelivery: (last.redisUsedBytes - from.usedBytes) / windowDelivered,
      categories,
      unattributedBytesPerDelivery: (last.redisUsedBytes - from.usedBytes - keysGrowth) / windowDelivered,
    };
    const perMinute = (pick: (s: SoakSample) => number) =>
      slope(samples.map((s) => ({ x: s.atSeconds / 60, y: pick(s) })));
    const marked = prefill + perTick * ticks;
    return {
      seconds: last.atSeconds,
      webhooks: options.webhooks,
      perSecond: (last.delivered - first.delivered) / last.atSeconds,
      delivered: last.delivered - first.delivered,
      samples,
      redisFirstBytes: first.redisUsedBytes,
      redisLastBytes: last.redisUsedBytes,
      redisMaxBytes: Math.max(...samples.map((s) => s.redisUsedBytes)),
      redisSlopeBytesPerMinute: perMinute((s) => s.redisUsedBytes),
      redisGrowthBytesPerDelivery:
        (last.redisUsedBytes - first.redisUsedBytes) / Math.max(1, last.delivered - first.delivered),
      rssFirstBytes: first.rssBytes,
      rssLastBytes: last.rssBytes,
      rssMaxBytes: Math.max(...samples.map((s) => s.rssBytes)),
      rssSlopeBytesPerMinute: perMinute((s) => s.rssBytes),
      workerEntry: worker.entry,
      workerRssFirstBytes: first.workerRssBytes,
      workerRssLastBytes: last.workerRssBytes,
      workerRssMaxBytes: Math.max(...samples.map((s) => s.workerRssBytes)),
      workerRssMedianBytes: percentile(
        samples.map((s) => s.workerRssBytes).sort((a, b) => a - b),
        0.5,
      ),
      workerRssSlopeBytesPerMinute: perMinute((s) => s.workerRssBytes),
      retainedHeapFirstBytes: first.retainedHeapBytes,
      retainedHeapLastBytes: last.retainedHeapBytes,
      retainedHeapSlopeBytesPerMinute: perMinute((s) => s.retainedHeapBytes),
      deliveryRecordsCap: options.webhooks * RECENT_PER_WEBHOOK,
      dedupeMarkBytes: (await patternBytes(engine.redis, `{${engine.prefix}:dd*`)).bytes / marked,
      tombstoneBytes: await tombstoneBytes(engine.redis, `{${engine.prefix}:wh:*}:delivery:*`),
      steady,
    };
  } finally {
    await run.forget();
    await engine.close();
  }
}

/** MEMORY USAGE of the first record key holding only a status (a tombstone), or 0 when none is found. */
async function tombstoneBytes(redis: BenchEngine['redis'], pattern: string): Promise<number> {
  let cursor = '0';
  for (let round = 0; round < 1_000; round++) {
    const [next, found] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    for (const key of found) if ((await redis.hlen(key)) === 1) return keyBytes(redis, key);
    cursor = next;
    if (cursor === '0') break;
  }
  return 0;
}
