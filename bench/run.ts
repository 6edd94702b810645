/**
 * `npm run bench`: the benchmark harness; USAGE below says what it runs and how to size it.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectRedis } from '../src/store/redis.js';
import { ensureRedisServerBinary, startRedisServer } from '../src/embedded/redis-server.js';
import type { ThroughputFigures } from './baselines.js';
import { manyReceivers, type ReceiversRun } from './receivers.js';
import {
  bareThroughput,
  hooklineAimd,
  hooklineFirstContact,
  hooklineFlaky,
  hooklineIsolation,
  hooklineLatency,
  hooklineSplitThroughput,
  hooklineThroughput,
  LEAN_BATCH_SIZE,
  leanThroughput,
  naiveThroughput,
  warmReceiver,
  type DeliveryBenchSetup,
  type HooklineThroughput,
} from './delivery.js';
import { hooklineOnCluster } from './cluster.js';
import {
  ATTRIBUTION_NOTE,
  costPerDelivery,
  costTableRows,
  largestDifferences,
  profileRun,
  type ProfiledRun,
} from './cpu-profile.js';
import { engineConfig } from './engine.js';
import { traceCost } from './traces.js';
import { pendingFootprint, soak } from './footprint.js';
import { ingestFilterCost, ingestThroughput } from './ingest.js';
import { benchMachineListing } from './machines.js';
import { megabytes, ratio } from './measure.js';
import { ReceiverProcess } from './receiver-client.js';
import { targetCheck, targetsTable, verdictOf, type Check } from './targets.js';

interface BenchContext {
  redisUrl: string;
  smoke: boolean;
  env: NodeJS.ProcessEnv;
  /** The delivery scenarios' sizes and receiver (started on first use). */
  delivery(): Promise<DeliveryBenchSetup>;
  /** Hookline's all-healthy e2e rate: from the e2e scenario, or measured now when it did not run. */
  hooklineRate(): Promise<number>;
  /** What the e2e scenario measured, for the scenarios after it. */
  e2e: HooklineThroughput | undefined;
  /** The naive baseline as the e2e scenario measured it. */
  naive: ThroughputFigures | undefined;
  /** The lean pipeline as the e2e scenario measured it. */
  lean: ThroughputFigures | undefined;
}

interface ScenarioResult {
  /** What was measured, e.g. "100000 machines, 2000 queries". */
  size: string;
  /** The headline figures. */
  figures: string;
  checks: Check[];
  /** Further figures: label → formatted value. */
  notes: Record<string, string>;
  /** Lines printed after the scenario's line, and in latest.md (e.g. a markdown table). */
  table?: string[];
  /** Raw figures for latest.json. */
  raw: Record<string, unknown>;
}

interface Scenario {
  /** The name `--only` takes. */
  id: string;
  name: string;
  /** Runs only when named by `--only` (e.g. for profiling). */
  optIn?: boolean;
  /** A full-size run fails when this check (by target text) is missed; every other check is only reported. */
  enforced?: string;
  run(context: BenchContext): Promise<ScenarioResult>;
}

function positiveInteger(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${text}"`);
  return value;
}

const ms = (value: number) => `${value.toFixed(Math.abs(value) < 10 ? 2 : 1)} ms`;
const perSecond = (value: number) => `${Math.round(value)}/s`;
const times = (value: number) => value.toFixed(2);
const mb = (bytes: number) => `${megabytes(bytes).toFixed(1)} MB`;
const bytes = (value: number) => `${Math.round(value)} B`;

/** Deferrals by reason, e.g. "slow 12, concurrency 40", or "none". */
const deferralList = (deferred: Record<string, number>) =>
  Object.entries(deferred)
    .map(([reason, n]) => `${reason} ${n}`)
    .join(', ') || 'none';

const LISTING_P99_LIMIT = 'p99 ≤ 25 ms';

const cpuCost = (f: ThroughputFigures) =>
  `${Math.round(f.processCpuUsPerDelivery)} + ${Math.round(f.redisCpuUsPerDelivery)} µs`;

const SCENARIOS: Scenario[] = [
  {
    id: 'e2e',
    name: 'e2e throughput',
    async run(context) {
      const setup = await context.delivery();
      // One run of each, one after the other, as the ratios are of runs made on the same machine at
      // nearly the same time.
      const hookline = await hooklineThroughput(setup);
      context.e2e = hookline;
      const lean = await leanThroughput(setup);
      context.lean = lean;
      const naive = await naiveThroughput(setup);
      context.naive = naive;
      const bare = await bareThroughput(setup);
      const overNaive = ratio(hookline.perSecond, naive.perSecond);
      const overBare = ratio(hookline.perSecond, bare.perSecond);
      const cpuOverLean = ratio(hookline.processCpuUsPerDelivery, lean.processCpuUsPerDelivery);
      return {
        size: `${setup.events} events → ${setup.vendors} webhooks, C=${setup.concurrency}, ${setup.config.queuePartitions} partitions, ${setup.payloadBytes} B payload, ${setup.posters} producers × ${setup.batchSize}/request (the lean pipeline's × ${LEAN_BATCH_SIZE})`,
        figures:
          `Hookline ${perSecond(hookline.perSecond)}, lean pipeline ${perSecond(lean.perSecond)}, naive BullMQ ${perSecond(naive.perSecond)}, bare undici ${perSecond(bare.perSecond)}; ` +
          `Hookline ÷ naive ${times(overNaive)}, ÷ bare ${times(overBare)}, lean ÷ naive ${times(ratio(lean.perSecond, naive.perSecond))}`,
        checks: [
          targetCheck('e2e-over-naive', times(overNaive), overNaive >= 1.5),
          targetCheck('e2e-floor', times(overNaive), overNaive >= 1.2),
          targetCheck(
            'cpu-over-lean',
            `${Math.round(hookline.processCpuUsPerDelivery)} ÷ ${Math.round(lean.processCpuUsPerDelivery)} µs = ${times(cpuOverLean)}`,
            cpuOverLean <= 1.5,
          ),
        ],
        notes: {
          'CPU per delivery, process + Redis (Hookline/lean/naive/bare)': `${cpuCost(hookline)} / ${cpuCost(lean)} / ${cpuCost(naive)} / ${cpuCost(bare)}`,
          'Hookline RSS max': mb(hookline.rssMaxBytes),
          'RSS median': mb(hookline.rssMedianBytes),
          'RSS before the run': mb(hookline.rssBeforeBytes),
          'heap max': mb(hookline.heapUsedMaxBytes),
          'redeliveries (Hookline/lean/naive/bare)': `${hookline.duplicates}/${lean.duplicates}/${naive.duplicates}/${bare.duplicates}`,
          'Redis commands per delivery, incl. those inside scripts (Hookline/lean/naive)': `${hookline.redisCommandsPerDelivery.toFixed(2)} / ${lean.redisCommandsPerDelivery.toFixed(2)} / ${naive.redisCommandsPerDelivery.toFixed(2)}`,
          'read models, accepted → visible in the lookups (per ingest request)': `p50 ≤ ${hookline.readModelDelay.p50UpToMs} ms, p99 ≤ ${hookline.readModelDelay.p99UpToMs} ms (${hookline.readModelDelay.entries} requests)`,
          'Hookline delivery runs': Object.entries(hookline.outcomes)
            .map(([kind, n]) => `${kind} ${n}`)
            .join(', '),
        },
        raw: {
          events: setup.events,
          vendors: setup.vendors,
          concurrency: setup.concurrency,
          queuePartitions: setup.config.queuePartitions,
          payloadBytes: setup.payloadBytes,
          warmup: setup.warmup,
          hookline,
          lean,
          naive,
          bare,
          hooklineOverNaive: overNaive,
          hooklineOverBare: overBare,
          hooklineCpuOverLean: cpuOverLean,
        },
      };
    },
  },
  {
    id: 'cost',
    name: 'CPU cost per delivery',
    async run(context) {
      const setup = await context.delivery();
      const hookline = context.e2e ?? (await hooklineThroughput(setup));
      const lean = context.lean ?? (await leanThroughput(setup));
      const naive = context.naive ?? (await naiveThroughput(setup));
      // Profiled runs of their own, after the measured ones: sampling costs a few per cent, which
      // the e2e figures should not carry.
      const hooklineRun = await profileRun((probe) => hooklineThroughput(setup, setup.events, { probe }));
      const leanRun = await profileRun((probe) => leanThroughput(setup, { probe }));
      const hooklineCost = costPerDelivery(
        hooklineRun.profiled,
        hooklineRun.result.deliveries,
        hookline.processCpuUsPerDelivery,
      );
      const leanCost = costPerDelivery(leanRun.profiled, leanRun.result.deliveries, lean.processCpuUsPerDelivery);
      const profiledUs = (run: { profiled: ProfiledRun; result: ThroughputFigures }) =>
        Math.round(run.profiled.processUs / run.result.deliveries);
      return {
        size: `${setup.events} events each, as e2e; a profiled run of Hookline and of the lean pipeline after the measured ones`,
        figures:
          `process CPU per delivery: Hookline ${Math.round(hookline.processCpuUsPerDelivery)} µs, lean ${Math.round(lean.processCpuUsPerDelivery)} µs, naive ${Math.round(naive.processCpuUsPerDelivery)} µs; ` +
          `Hookline's extra µs over the lean pipeline's go most to ${largestDifferences(hooklineCost, leanCost, 4)}`,
        checks: [],
        notes: {
          'the profiled runs themselves (Hookline/lean)': `${profiledUs(hooklineRun)} / ${profiledUs(leanRun)} µs per delivery`,
        },
        table: [
          ...costTableRows(
            hooklineCost,
            leanCost,
            { processUs: naive.processCpuUsPerDelivery },
            {
              hookline: hookline.redisCpuUsPerDelivery,
              lean: lean.redisCpuUsPerDelivery,
              naive: naive.redisCpuUsPerDelivery,
            },
          ),
          '',
          `How the parts are found: V8 samples the main thread every 250 µs through each profiled run. ${ATTRIBUTION_NOTE} ` +
            'Sample time is scaled to the main thread’s CPU time over the run, the other threads’ CPU is a row of its own, and each column is scaled to the ' +
            'process CPU per delivery of its unprofiled e2e run (the totals); the naive worker’s is that total alone.',
        ],
        raw: { hookline: hooklineCost, lean: leanCost, naiveProcessCpuUsPerDelivery: naive.processCpuUsPerDelivery },
      };
    },
  },
  {
    id: 'e2e-split',
    name: 'e2e throughput, API and worker processes',
    async run(context) {
      const setup = await context.delivery();
      const split = await hooklineSplitThroughput(setup);
      const naive = context.naive ?? (await naiveThroughput(setup));
      const overNaive = ratio(split.perSecond, naive.perSecond);
      return {
        size: `as e2e, with the deliveries made by a separate \`hookline worker\` process (${split.workerEntry})`,
        figures: `Hookline ${perSecond(split.perSecond)}, naive BullMQ ${perSecond(naive.perSecond)}; Hookline ÷ naive ${times(overNaive)}`,
        checks: [{ target: 'API + worker processes ÷ naive ≥ 2.00', value: times(overNaive), met: overNaive >= 2 }],
        notes: {
          'CPU per delivery: API process + worker process + Redis': `${Math.round(split.apiCpuUsPerDelivery)} + ${Math.round(split.workerCpuUsPerDelivery)} + ${Math.round(split.redisCpuUsPerDelivery)} µs`,
          'worker RSS max': mb(split.workerRssMaxBytes),
          'Redis commands per delivery, incl. inside scripts': split.redisCommandsPerDelivery.toFixed(2),
          redeliveries: String(split.duplicates),
        },
        raw: { split, naive },
      };
    },
  },
  {
    id: 'e2e-thread',
    name: 'e2e throughput, API and a delivery thread',
    async run(context) {
      const setup = await context.delivery();
      const threaded = await hooklineSplitThroughput(setup, 'thread');
      const single = context.e2e;
      const naive = context.naive ?? (await naiveThroughput(setup));
      const overNaive = ratio(threaded.perSecond, naive.perSecond);
      const overSingle = single ? ratio(threaded.perSecond, single.perSecond) : undefined;
      const cpuOverSingle = single
        ? ratio(threaded.processCpuUsPerDelivery, single.processCpuUsPerDelivery)
        : undefined;
      return {
        size: 'as e2e, with the deliveries made by a worker-role engine in a worker_threads thread of the process',
        figures:
          `Hookline with a delivery thread ${perSecond(threaded.perSecond)}, in one thread ${single ? perSecond(single.perSecond) : 'not run'}, ` +
          `naive BullMQ ${perSecond(naive.perSecond)}; ÷ naive ${times(overNaive)}` +
          (overSingle === undefined ? '' : `, ÷ one thread ${times(overSingle)}`),
        checks: [],
        notes: {
          'CPU per delivery, process (both threads) + Redis': `${Math.round(threaded.processCpuUsPerDelivery)} + ${Math.round(threaded.redisCpuUsPerDelivery)} µs`,
          ...(cpuOverSingle === undefined ? {} : { 'CPU per delivery ÷ one thread': times(cpuOverSingle) }),
          redeliveries: String(threaded.duplicates),
        },
        raw: { threaded, naive, ...(single ? { single } : {}) },
      };
    },
  },
  {
    id: 'hookline',
    name: 'e2e throughput, Hookline alone',
    optIn: true,
    async run(context) {
      const setup = await context.delivery();
      const hookline = await hooklineThroughput(setup);
      context.e2e = hookline;
      return {
        size: `${setup.events} events → ${setup.vendors} webhooks, C=${setup.concurrency}, ${setup.config.queuePartitions} partitions, ${setup.payloadBytes} B payload`,
        figures: `Hookline ${perSecond(hookline.perSecond)}`,
        checks: [],
        notes: {
          'CPU per delivery, process + Redis': cpuCost(hookline),
          'RSS max': mb(hookline.rssMaxBytes),
          'heap max': mb(hookline.heapUsedMaxBytes),
          'delivery runs': Object.entries(hookline.outcomes)
            .map(([kind, n]) => `${kind} ${n}`)
            .join(', '),
        },
        raw: { hookline },
      };
    },
  },
  {
    id: 'traces',
    name: 'e2e with OpenTelemetry trace export on, against the same run with it off',
    async run(context) {
      const setup = await context.delivery();
      const { off, on, exported } = await traceCost(setup);
      const overOff = ratio(on.processCpuUsPerDelivery, off.processCpuUsPerDelivery);
      return {
        size: `${setup.events} events → ${setup.vendors} webhooks, http/protobuf to a local OTLP sink, every trace sampled (parentbased_always_on)`,
        figures: `off ${perSecond(off.perSecond)}, on ${perSecond(on.perSecond)}`,
        checks: [],
        notes: {
          'CPU per delivery, process + Redis, off': cpuCost(off),
          'CPU per delivery, process + Redis, on': cpuCost(on),
          'process CPU on ÷ off': times(overOff),
          'spans exported': `${exported.requests} requests, ${mb(exported.bytes)}`,
        },
        raw: { off, on, exported },
      };
    },
  },
  {
    id: 'cluster',
    name: 'e2e on a 3-master Redis Cluster',
    async run(context): Promise<ScenarioResult> {
      const setup = await context.delivery();
      const events = context.smoke ? setup.events : Math.min(setup.events, 10_000);
      const partitions = 12;
      // A thousand vendors: each webhook's keys are one slot, and with the e2e's hundred the share a
      // master gets depends on where a hundred random tags land (about ±14 % from run to run). Each
      // vendor has a webhook for each of the six types: the producers send all of them.
      const webhooks = context.smoke ? setup.vendors : 1_000;
      const r = await hooklineOnCluster({ ...setup, vendors: webhooks }, events, partitions);
      if (r === undefined) {
        return {
          size: 'skipped',
          figures: 'redis-server or redis-cli not installed',
          checks: [],
          notes: {},
          raw: { skipped: true },
        };
      }
      const third = 1 / r.masters;
      const within = r.shares.every((share) => Math.abs(share - third) <= third * 0.25);
      const pct = (share: number) => `${(share * 100).toFixed(1)} %`;
      return {
        size:
          `${events} events (${r.mix}; ${r.throughput.deliveries} deliveries) → ${webhooks} vendors × ${r.webhooksPerVendor} webhooks, ` +
          `C=${setup.concurrency}, ${r.masters} masters (contiguous slot ranges), HOOKLINE_QUEUE_PARTITIONS=${partitions}`,
        figures: `Hookline ${perSecond(r.throughput.perSecond)}; commands per master ${r.commands.join(' / ')}: ${r.shares.map(pct).join(' / ')}`,
        checks: [
          {
            target: 'each master within ±25 % of a third of the commands',
            value: r.shares.map(pct).join(' / '),
            met: within,
          },
        ],
        notes: {
          'the machine listing’s master': `#${r.listingMaster + 1}`,
          'CPU per master': r.cpuShares.map(pct).join(' / '),
          'Redis commands per event, all masters': (r.commands.reduce((a, b) => a + b, 0) / events).toFixed(2),
        },
        raw: { ...r },
      };
    },
  },
  {
    id: 'latency',
    name: 'latency at half load',
    async run(context) {
      const setup = await context.delivery();
      const maxRate = await context.hooklineRate();
      const seconds = context.smoke ? 2 : positiveInteger(context.env, 'BENCH_LATENCY_SECONDS', 10);
      // Producers posting what happened every 10 ms (the target is taken there), and every 50 ms as
      // the earlier rounds measured. At half load each tick's events take the engine half a tick to
      // handle (that is what half load means), so with 50 ms ticks an event waits about 12 ms behind
      // the rest of its own tick whatever the engine does; 10 ms ticks leave the engine's own latency.
      const tickMs = positiveInteger(context.env, 'BENCH_LATENCY_TICK_MS', 10);
      const r = await hooklineLatency(setup, maxRate / 2, seconds, tickMs);
      const coarse = await hooklineLatency(setup, maxRate / 2, seconds, 50);
      return {
        size: `${r.events} events at ${perSecond(r.targetPerSecond)} (half of ${perSecond(maxRate)}) for ${r.seconds.toFixed(1)} s, batches every ${tickMs} ms (and again every 50 ms)`,
        figures:
          `accepted (by ingest) → received: p50 ${ms(r.p50Ms)}, p99 ${ms(r.p99Ms)}, max ${ms(r.maxMs)}; ` +
          `batches every 50 ms: p50 ${ms(coarse.p50Ms)}, p99 ${ms(coarse.p99Ms)}, max ${ms(coarse.maxMs)}`,
        checks: [
          targetCheck('latency-p50', ms(r.p50Ms), r.p50Ms <= 5),
          targetCheck('latency-p99', ms(r.p99Ms), r.p99Ms <= 30),
        ],
        notes: {
          'POST sent → received p50': ms(r.postedP50Ms),
          p99: ms(r.postedP99Ms),
          'achieved rate': perSecond(r.achievedPerSecond),
          'every 50 ms: POST sent → received p50': ms(coarse.postedP50Ms),
        },
        raw: { maxRatePerSecond: maxRate, tickMs, ...r, everyFiftyMs: coarse },
      };
    },
  },
  {
    id: 'isolation',
    name: 'isolation',
    async run(context) {
      const setup = await context.delivery();
      const allHealthy = await context.hooklineRate();
      const r = await hooklineIsolation(setup, 5_000);
      const share = ratio(r.healthyPerSecond, allHealthy);
      const deferred = deferralList(r.deferred);
      return {
        size: `${setup.events} events, ${r.hangingWebhooks} of ${setup.vendors} webhooks hang (own origins), timeout ${r.deliveryTimeoutMs / 1000} s, C=${setup.concurrency}`,
        figures: `healthy ${perSecond(r.healthyPerSecond)} ÷ all-healthy ${perSecond(allHealthy)} = ${times(share)}`,
        checks: [targetCheck('isolation', times(share), share >= 0.9)],
        notes: {
          'attempts that reached a hanging endpoint': String(r.hangingAttempts),
          timeouts: String(r.timeouts),
          deferred,
        },
        raw: { allHealthyPerSecond: allHealthy, ratio: share, ...r },
      };
    },
  },
  {
    id: 'aimd',
    name: 'adaptive concurrency',
    async run(context) {
      const setup = await context.delivery();
      const allHealthy = await context.hooklineRate();
      const r = await hooklineAimd(setup);
      const late429 = r.lateAttempts === 0 ? 0 : r.late429 / r.lateAttempts;
      const used = ratio(r.steadyPerSecond, r.idealPerSecond);
      const share = ratio(r.healthyPerSecond, allHealthy);
      const deferred = deferralList(r.deferred);
      return {
        size: `${setup.events} events, ${r.limited} to a receiver taking ${r.capacity} at once (${r.latencyMs} ms each, 429 above), C=${setup.concurrency}`,
        figures:
          `429s after ${r.warmUpMs / 1000} s ${(late429 * 100).toFixed(1)} %; limited ${perSecond(r.steadyPerSecond)} ÷ ${perSecond(r.idealPerSecond)} = ${times(used)}; ` +
          `healthy ${perSecond(r.healthyPerSecond)} ÷ all-healthy ${perSecond(allHealthy)} = ${times(share)}`,
        checks: [
          {
            target: 'every delivery verified',
            value: `${r.verified}/${r.total}, ${r.deadLettered} dead-lettered`,
            met: r.verified >= r.total,
          },
          { target: '429s after warm-up < 5 %', value: `${(late429 * 100).toFixed(1)} %`, met: late429 < 0.05 },
          { target: 'limited ÷ capacity/latency ≥ 0.80', value: times(used), met: used >= 0.8 },
          { target: 'healthy ÷ all-healthy ≥ 0.90', value: times(share), met: share >= 0.9 },
        ],
        notes: {
          '429s over the whole run': `${r.all429} of ${r.attempts} attempts`,
          'most requests open at the limited receiver': String(r.mostInflight),
          deferred,
        },
        raw: { allHealthyPerSecond: allHealthy, late429Share: late429, limitedRatio: used, healthyRatio: share, ...r },
      };
    },
  },
  {
    id: 'first-contact',
    name: 'burst to a first contact',
    async run(context) {
      const setup = await context.delivery();
      const r = await hooklineFirstContact(setup);
      const naive = context.naive;
      const overNaive = naive ? ratio(r.perSecond, naive.perSecond) : undefined;
      return {
        size: `${r.events} events → ${setup.vendors} webhooks on one receiver a fresh engine never contacted (its first answer 500 ms late), no warm-up, C=${setup.concurrency}`,
        figures: `${perSecond(r.perSecond)}${overNaive === undefined ? '' : ` (÷ naive ${times(overNaive)})`}; accepted → received p50 ${ms(r.p50Ms)}, p99 ${ms(r.p99Ms)}, max ${ms(r.maxMs)}; ${r.deferred} deferred behind the first contact`,
        checks: [targetCheck('first-contact', ms(r.longestGapMs), r.longestGapMs < 1_000)],
        notes: { 'longest gap between receptions': ms(r.longestGapMs) },
        raw: { ...r, ...(overNaive === undefined ? {} : { overNaive }) },
      };
    },
  },
  {
    id: 'flaky',
    name: 'flaky receivers',
    async run(context) {
      const setup = await context.delivery();
      const r = await hooklineFlaky(setup, {
        events: context.smoke ? 300 : 3_000,
        receivers: context.smoke ? 6 : 36,
        deliveryTimeoutMs: context.smoke ? 1_000 : 5_000,
        // The smoke run's schedule ends within 2.5 minutes: waiting longer would only let a stuck
        // delivery hold up CI (the figures then say how many arrived) instead of showing it.
        waitMs: context.smoke ? 210_000 : setup.timeoutMs + 10 * 60_000,
      });
      return {
        size: `${r.events} events over ${r.receivers} receivers (own origins) that answer 500 to ${r.failRate * 100} % and never answer ${r.hangRate * 100} % of requests; timeout ${r.deliveryTimeoutMs / 1000} s; schedule ${r.retrySchedule}`,
        figures: `every event delivered after ${r.seconds.toFixed(1)} s; ${r.circuitsOpened} circuits opened, ${r.circuitOpenAttempts} attempts held as circuit_open`,
        checks: [
          targetCheck('flaky-delivered', `${r.delivered}/${r.events}`, r.delivered === r.events),
          targetCheck('flaky-circuits', String(r.circuitsOpened), r.circuitsOpened === 0),
        ],
        notes: { 'attempts timed out': String(r.timeouts), 'answered 500': String(r.refused) },
        raw: { ...r },
      };
    },
  },
  {
    id: 'receivers',
    name: 'many HTTPS receivers',
    async run(context) {
      const setup = await context.delivery();
      const options = context.smoke
        ? { receivers: 20, ratePerSecond: 20, seconds: 4, shortIdleMs: 1_000, longIdleMs: 75_000 }
        : { receivers: 1_000, ratePerSecond: 200, seconds: 30, shortIdleMs: 5_000, longIdleMs: 75_000 };
      const runs = await manyReceivers(setup, options);
      const [one, long, short, noCache] = runs as [ReceiversRun, ReceiversRun, ReceiversRun, ReceiversRun];
      const perReceiver = (n: number) => n / options.receivers;
      // Counted with the first contacts: what a receiver sees over the worker's life.
      const connections = (run: ReceiversRun) => run.firstContactConnections + run.connections;
      const full = (run: ReceiversRun) => connections(run) - run.firstContactResumed - run.resumed;
      const cpuOverOne = ratio(long.workerCpuUsPerDelivery, one.workerCpuUsPerDelivery);
      const describe = (run: ReceiversRun) =>
        `${run.label} (${run.origins} origin${run.origins === 1 ? '' : 's'}, idle ${run.idleMs / 1000} s${run.tlsSessionCache === 0 ? ', HOOKLINE_TLS_SESSION_CACHE=0' : ''}): ${run.firstContactConnections} connections at first contact, then ${run.connections} for ${run.deliveries} deliveries (${run.resumed} resumed); ${perReceiver(connections(run)).toFixed(2)} connections and ${perReceiver(full(run)).toFixed(2)} full handshakes a receiver; worker ${Math.round(run.workerCpuUsPerDelivery)} µs a delivery after first contact`;
      return {
        size: `${options.receivers} webhooks at ${options.ratePerSecond} events/s in all (one every ${options.receivers / options.ratePerSecond} s each) for ${options.seconds} s, each to an HTTPS receiver of its own origin (a CA made for the run, NODE_EXTRA_CA_CERTS), delivered by a hookline worker process, C=${setup.concurrency}`,
        figures: runs.map(describe).join('; '),
        checks: [
          {
            target: 'receivers idle 75 s: connections ≤ 1.1 a receiver',
            value: perReceiver(connections(long)).toFixed(2),
            met: perReceiver(connections(long)) <= 1.1,
          },
          {
            target: 'receivers idle 75 s: worker CPU a delivery ≤ 1.5 × one origin’s',
            value: `${Math.round(long.workerCpuUsPerDelivery)} ÷ ${Math.round(one.workerCpuUsPerDelivery)} µs = ${times(cpuOverOne)}`,
            met: cpuOverOne <= 1.5,
          },
          {
            target: `receivers idle ${options.shortIdleMs / 1000} s: full TLS handshakes ≤ 1.1 a receiver`,
            value: perReceiver(full(short)).toFixed(2),
            met: perReceiver(full(short)) <= 1.1,
          },
        ],
        notes: {
          'without TLS session resumption (full handshakes a receiver, CPU a delivery ÷ with it)': `${perReceiver(full(noCache)).toFixed(2)}, ${times(ratio(noCache.workerCpuUsPerDelivery, short.workerCpuUsPerDelivery))}`,
        },
        raw: { options, runs },
      };
    },
  },
  {
    id: 'ingest',
    name: 'ingest',
    async run(context) {
      const setup = await context.delivery();
      const events = context.smoke ? 1_000 : positiveInteger(context.env, 'BENCH_INGEST_EVENTS', setup.events);
      const r = await ingestThroughput(setup, events);
      const share = ratio(r.hooklinePerSecond, r.addBulkPerSecond);
      return {
        size: `${events} events → ${setup.vendors} webhooks, ${r.batchSize}/request, ${setup.posters} in flight, no worker`,
        figures: `Hookline ${perSecond(r.hooklinePerSecond)} accepted, raw addBulk ${perSecond(r.addBulkPerSecond)}; ratio ${times(share)}`,
        checks: [targetCheck('ingest', times(share), share >= 1)],
        notes: {
          'CPU per event, process + Redis (Hookline/addBulk)': `${Math.round(r.hooklineProcessCpuUsPerEvent)} + ${Math.round(r.hooklineRedisCpuUsPerEvent)} µs / ${Math.round(r.addBulkProcessCpuUsPerEvent)} + ${Math.round(r.addBulkRedisCpuUsPerEvent)} µs`,
        },
        raw: { ratio: share, ...r },
      };
    },
  },
  {
    id: 'filters',
    name: 'ingest with payload filters',
    async run(context) {
      const setup = await context.delivery();
      const events = context.smoke ? 1_000 : positiveInteger(context.env, 'BENCH_INGEST_EVENTS', setup.events);
      const webhooks = context.smoke ? 50 : 1_000;
      const r = await ingestFilterCost(setup, events, webhooks);
      const share = ratio(r.filteredPerSecond, r.plainPerSecond);
      return {
        size: `${events} events → ${webhooks} webhooks, each holding an 8-node filter that matches every event, against none; ${setup.posters} in flight, no worker`,
        figures: `with filters ${perSecond(r.filteredPerSecond)}, without ${perSecond(r.plainPerSecond)}; ratio ${times(share)}`,
        checks: [
          { target: 'filters cost ≤ 10 % of ingest throughput (≥ 0.90)', value: times(share), met: share >= 0.9 },
        ],
        notes: {
          'CPU per event in the process (with/without filters)': `${Math.round(r.filteredProcessCpuUsPerEvent)} / ${Math.round(r.plainProcessCpuUsPerEvent)} µs`,
        },
        raw: { ratio: share, ...r },
      };
    },
  },
  {
    id: 'footprint',
    name: 'footprint',
    async run(context) {
      const setup = await context.delivery();
      const pending = context.smoke ? 500 : positiveInteger(context.env, 'BENCH_FOOTPRINT_EVENTS', 10_000);
      const p = await pendingFootprint(setup, pending);
      const maxRate = await context.hooklineRate();
      const seconds = context.smoke ? 5 : positiveInteger(context.env, 'BENCH_SOAK_SECONDS', 60);
      const webhooks = context.smoke ? 1 : 10;
      // Every bounded structure is full once the tombstones of records off the logs (kept 5 minutes)
      // have reached their steady count: the steady window starts after that, in a soak long enough.
      const tombstonesSteady = seconds >= 600;
      const steadyAfterSeconds = tombstonesSteady ? 330 : Math.floor(seconds / 2);
      const s = await soak(setup, {
        seconds,
        perSecond: maxRate / 2,
        webhooks,
        sampleMs: context.smoke ? 1_000 : 5_000,
        steadyAfterSeconds,
      });
      const rssAtLoad = s.workerRssMedianBytes;
      // Each delivery leaves its dedupe mark (for the dedupe window, 48 h) and, in a soak too short for
      // the tombstones to be steady, a status tombstone for 5 minutes; everything else must be flat.
      // The event log keeps each event for the retention (7 days by default): growth by design,
      // measured and reported apart (its category below), so it is allowed for here.
      const eventLogBytes = Math.max(0, s.steady.categories['event log']?.bytesPerDelivery ?? 0);
      const growthLimit = s.dedupeMarkBytes + eventLogBytes + (tombstonesSteady ? 10 : s.tombstoneBytes + 10);
      const heapSlopeLimit = 1024 * 1024;
      const w = s.steady;
      const categories = Object.entries(w.categories)
        .sort(([, a], [, b]) => b.bytesTo - a.bytesTo)
        .map(
          ([name, c]) =>
            `${name} ${c.keysTo} keys ${mb(c.bytesTo)} (${c.bytesPerDelivery >= 0 ? '+' : ''}${c.bytesPerDelivery.toFixed(1)} B/delivery)`,
        )
        .join('; ');
      return {
        size: `${pending} pending × ${p.payloadBytes} B; soak ${s.seconds.toFixed(0)} s at ${perSecond(s.perSecond)} to ${webhooks} webhook${webhooks === 1 ? '' : 's'} after filling ${webhooks === 1 ? 'its log' : 'their logs'}`,
        figures:
          `${bytes(p.overheadBytesPerDelivery)}/pending delivery beyond the payload; worker process RSS median ${mb(rssAtLoad)} (${mb(s.workerRssFirstBytes)} → ${mb(s.workerRssLastBytes)}, max ${mb(s.workerRssMaxBytes)}); ` +
          `soak: Redis ${mb(s.redisFirstBytes)} → ${mb(s.redisLastBytes)} (${bytes(s.redisGrowthBytesPerDelivery)}/delivery), ` +
          `retained heap ${mb(s.retainedHeapFirstBytes)} → ${mb(s.retainedHeapLastBytes)} (${mb(s.retainedHeapSlopeBytesPerMinute)}/min), RSS ${mb(s.rssFirstBytes)} → ${mb(s.rssLastBytes)}`,
        checks: [
          {
            target: '≤ 1.5 KB/pending delivery',
            value: bytes(p.overheadBytesPerDelivery),
            met: p.overheadBytesPerDelivery <= 1_536,
          },
          { target: 'dedupe marks ≤ 40 B per event id', value: bytes(s.dedupeMarkBytes), met: s.dedupeMarkBytes <= 40 },
          {
            target: 'worker RSS (median at steady load) ≤ 200 MB',
            value: mb(rssAtLoad),
            met: rssAtLoad <= 200 * 1024 * 1024,
          },
          {
            target: 'retained heap slope ≤ 1 MB/min',
            value: mb(s.retainedHeapSlopeBytesPerMinute),
            met: s.retainedHeapSlopeBytesPerMinute <= heapSlopeLimit,
          },
          {
            target: `steady window (from ${w.fromSeconds.toFixed(0)} s): Redis growth ≤ the dedupe mark + the event log's entry + ${tombstonesSteady ? '' : 'a tombstone + '}10 B (${bytes(growthLimit)})/delivery${tombstonesSteady ? '' : ' (judged in a soak of ≥ 600 s)'}`,
            value: bytes(w.redisGrowthBytesPerDelivery),
            met: tombstonesSteady ? w.redisGrowthBytesPerDelivery <= growthLimit : undefined,
          },
          {
            // A slope over a window of a minute or two is start-up and sampling noise: judged only in
            // a soak long enough for the tombstones to be steady (BENCH_SOAK_SECONDS ≥ 600; the
            // target's soak is 1,800).
            target: `steady window: worker RSS slope ≤ 0.5 MB/min${tombstonesSteady ? '' : ' (judged in a soak of ≥ 600 s)'}`,
            value: `${mb(w.workerRssSlopeBytesPerMinute)}/min`,
            met: tombstonesSteady ? w.workerRssSlopeBytesPerMinute <= 0.5 * 1024 * 1024 : undefined,
          },
        ],
        notes: {
          'first-attempt stream beyond payload': bytes(p.streamOverheadBytes),
          'dedupe mark': bytes(p.dedupeMarkBytes),
          'BullMQ queues': bytes(p.queueBytesPerDelivery),
          'without client buffers': bytes(p.overheadBytesPerDeliveryNoClients),
          'event log (payload copy included, kept for the retention)': `${bytes(p.eventLogBytesPerDelivery)}/delivery`,
          'delivery records kept': `${w.categories['delivery records']?.keysTo ?? 0} (log cap ${s.deliveryRecordsCap}), and ${w.categories['record tombstones']?.keysTo ?? 0} tombstones`,
          'Redis max': mb(s.redisMaxBytes),
          'Redis slope': `${mb(s.redisSlopeBytesPerMinute)}/min`,
          worker: s.workerEntry,
          'worker RSS slope': `${mb(s.workerRssSlopeBytesPerMinute)}/min`,
          'API + producers process RSS max (soak / e2e)': `${mb(s.rssMaxBytes)} / ${context.e2e ? mb(context.e2e.rssMaxBytes) : 'not run'}`,
          'steady window': `${w.fromSeconds.toFixed(0)}–${w.toSeconds.toFixed(0)} s, ${w.delivered} deliveries, Redis slope ${mb(w.redisSlopeBytesPerMinute)}/min`,
          'keys at the end, and their growth over the steady window': categories,
          'growth in no key (Redis tables, allocator)': `${w.unattributedBytesPerDelivery.toFixed(1)} B/delivery`,
        },
        raw: { pending: p, soak: s, rssAtLoadBytes: rssAtLoad },
      };
    },
  },
  // Last: its 100,000-machine in-memory index would otherwise sit in the heap the e2e RSS samples.
  {
    id: 'listing',
    name: 'machine listing',
    enforced: LISTING_P99_LIMIT,
    async run({ redisUrl, smoke, env }) {
      const machines = smoke ? 2_000 : positiveInteger(env, 'BENCH_MACHINES', 100_000);
      const queries = smoke ? 200 : positiveInteger(env, 'BENCH_QUERIES', 2_000);
      const r = await benchMachineListing({ machines, queries, redisUrl });
      return {
        size: `${machines} machines, ${queries} queries, ${r.writes} writes`,
        figures: `p50 ${ms(r.p50Ms)}, p99 ${ms(r.p99Ms)}, max ${ms(r.maxMs)}`,
        checks: [{ target: LISTING_P99_LIMIT, value: ms(r.p99Ms), met: r.p99Ms <= 25 }],
        notes: {
          'first load': ms(r.firstLoadMs),
          mean: ms(r.meanMs),
          seed: `${r.seedSeconds.toFixed(1)} s`,
          'machine changes on the listing’s one slot': `${perSecond(r.seedChangesPerSecond)} at ${r.seedRedisCpuUsPerChange.toFixed(1)} µs of Redis CPU each`,
        },
        raw: { machines, queries, ...r },
      };
    },
  },
];

/** What `--help` prints. */
const usage = () => `usage: npm run bench [-- --smoke] [-- --only <scenario>,<scenario>…]

Runs every scenario against a throwaway redis-server (or BENCH_REDIS_URL) and a receiver in its own
process, prints one line per scenario, the cost table and the round's targets (met or missed), and
writes bench/results/latest.{md,json}. It exits non-zero when a full-size run misses the machine
listing's p99 limit; every other target is reported, not enforced.

  --smoke         small sizes, limits not enforced (what CI runs)
  --only a,b      only these scenarios, no result files; the scenarios, in the order they run:
                  ${SCENARIOS.map((scenario) => scenario.id).join(', ')}
                  (hookline runs only when named: Hookline's e2e part alone, for node --cpu-prof, see bench/cpu-profile.ts;
                  e2e-split with BENCH_WORKER_NODE_ARGS="--cpu-prof --cpu-prof-dir=<dir>" profiles the worker process)
  --help          this text

Profiles of the cost scenario's runs: BENCH_CPU_PROFILE=<dir> writes each profiled run's CPU profile
there (.cpuprofile), BENCH_ALLOCATION_PROFILE=<dir> its sampled allocations (.heapprofile); open
either in Chrome's DevTools. BENCH_COMMANDSTATS=1 prints, for each measured delivery run, the
commands Redis processed per command and the bytes it read from clients.

Sizes: BENCH_MACHINES (100000), BENCH_QUERIES (2000), BENCH_EVENTS (20000), BENCH_CONCURRENCY (50),
BENCH_PAYLOAD_BYTES (1024), BENCH_LATENCY_SECONDS (10), BENCH_INGEST_EVENTS (BENCH_EVENTS),
BENCH_FOOTPRINT_EVENTS (10000), BENCH_SOAK_SECONDS (60), BENCH_WARMUP (deliveries before each
measured run, BENCH_EVENTS: with 500, the JIT was still compiling the hot path in the measured run). HOOKLINE_* variables configure the engine
as they configure \`hookline start\` (HOOKLINE_QUEUE_PARTITIONS, HOOKLINE_LOG_LEVEL, …).`;

interface Outcome {
  scenario: Scenario;
  result: ScenarioResult | undefined;
  error: string | undefined;
  /** False only for a missed enforced check in a full run, or an error. */
  passed: boolean;
}

const checksOf = (outcomes: readonly Outcome[]) =>
  outcomes.map(({ scenario, result, error }) => ({ scenario: scenario.id, checks: result?.checks, error }));

function verdicts(result: ScenarioResult): string {
  return result.checks.map(verdictOf).join(', ') || '—';
}

function machineDescription(redisVersion: string): Record<string, string> {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: String(cpus.length),
    memory: `${Math.round(os.totalmem() / 1024 ** 3)} GB`,
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    redis: redisVersion,
  };
}

const cell = (text: string) => text.replaceAll('|', '\\|');

function markdown(outcomes: readonly Outcome[], machine: Record<string, string>, smoke: boolean, date: string): string {
  const lines = [
    '# Benchmark results',
    '',
    `${date}${smoke ? ' (smoke run: small sizes, limits not enforced)' : ''}`,
    '',
    '| Machine | |',
    '|---|---|',
    `| CPU | ${machine.cpu} |`,
    `| Cores | ${machine.cores} |`,
    `| Memory | ${machine.memory} |`,
    `| Node | ${machine.node} |`,
    `| OS | ${machine.platform} |`,
    `| Redis | ${machine.redis} |`,
    '',
    '| Scenario | Size | Figures | Target | Result | Other figures |',
    '|---|---|---|---|---|---|',
  ];
  for (const { scenario, result, error } of outcomes) {
    if (!result) {
      lines.push(`| ${scenario.name} | | ERROR: ${cell(error ?? 'unknown')} | | | |`);
      continue;
    }
    const targets =
      result.checks.map((c) => `${c.target}${c.target === scenario.enforced ? ' (enforced)' : ''}`).join('; ') || '—';
    const notes = Object.entries(result.notes)
      .map(([label, value]) => `${label} ${value}`)
      .join(', ');
    lines.push(
      `| ${scenario.name} | ${cell(result.size)} | ${cell(result.figures)} | ${cell(targets)} | ${verdicts(result)} | ${cell(notes)} |`,
    );
  }
  const e2e = outcomes.find((o) => o.scenario.id === 'e2e')?.result?.raw as
    | { hookline: ThroughputFigures; lean: ThroughputFigures; naive: ThroughputFigures; bare: ThroughputFigures }
    | undefined;
  if (e2e) {
    lines.push(
      '',
      '| Delivery throughput | deliveries/s | deliveries | seconds | redeliveries | CPU µs/delivery, bench process | CPU µs/delivery, Redis | Redis commands/delivery (incl. inside scripts) |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
    );
    for (const [label, f] of [
      ['Hookline (ingest API → worker → receiver)', e2e.hookline],
      ['lean pipeline (ingest → Redis stream → sender)', e2e.lean],
      ['naive BullMQ worker', e2e.naive],
      ['bare undici loop', e2e.bare],
    ] as const) {
      lines.push(
        `| ${label} | ${Math.round(f.perSecond)} | ${f.deliveries} | ${f.seconds.toFixed(2)} | ${f.duplicates} | ${Math.round(f.processCpuUsPerDelivery)} | ${Math.round(f.redisCpuUsPerDelivery)} | ${f.redisCommandsPerDelivery.toFixed(2)} |`,
      );
    }
  }
  for (const { scenario, result } of outcomes) {
    if (result?.table) lines.push('', `## ${scenario.name}`, '', ...result.table);
  }
  lines.push('', '## Targets', '', ...targetsTable(checksOf(outcomes)));
  lines.push(
    '',
    'How each figure is taken:',
    '',
    '- Listing latencies are client-side HTTP requests over loopback to the real admin API (auth, filter parsing, catch-up round trip, matching, page fetch, serialization), first call excluded.',
    '- The receiver is a separate process that verifies every signature (Standard Webhooks for Hookline, the `x-webhook-signature` HMAC for the baselines) and counts distinct delivery ids. A rate is deliveries ÷ (first POST or addBulk → last verified delivery), after a warm-up on a fresh key prefix.',
    '- Hookline runs as `hookline start` does (`createEngine` with role `all`, the admin API on loopback), with metrics and info-level logs (written to the null device). The naive baseline is a plain BullMQ Queue and Worker with a pre-built body, one undici Agent and an HMAC header; the bare loop posts the same body with no Redis.',
    '- The lean pipeline (bench/lean.ts) is a minimal durable pipeline written for the bench: HTTP ingest of 100 events a request checked by hand, one script per batch that dedupes and appends to a Redis stream, and in the same process a consumer-group reader that signs (Standard Webhooks, cached keys), POSTs with undici at the same concurrency and writes each batch’s outcomes in one MULTI.',
    '- CPU per delivery is the bench process’s CPU time (every thread) over the measured run ÷ deliveries: the engine or baseline and its producers; Redis’s is INFO used_cpu over the same run. The cost table attributes a profiled run’s samples to parts (see under the table).',
    '- Latency: events posted in batches every 10 ms (and again every 50 ms) at half the measured e2e rate; accepted by ingest → verified at the receiver.',
    '- Isolation: every fifth webhook points at its own receiver port that accepts and never answers; healthy deliveries/s ÷ the all-healthy e2e rate.',
    "- Footprint: INFO used_memory before and after ingesting the pending events with no worker, minus the payload bytes; RSS is the bench process (API, worker and producers) sampled during the e2e run; the soak first fills every webhook's delivery log to its cap, then delivers at half the e2e rate while sampling.",
    '',
  );
  return lines.join('\n');
}

async function redisVersionAt(url: string): Promise<string> {
  const redis = connectRedis(url, { connectionName: 'hookline-bench-info', maxRetriesPerRequest: 3 });
  try {
    return /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown';
  } finally {
    await redis.quit();
  }
}

/** The scenario ids after `--only` (`--only a,b` or `--only=a,b`), or undefined to run all. */
function onlyIds(argv: readonly string[]): string[] | undefined {
  const at = argv.findIndex((arg) => arg === '--only' || arg.startsWith('--only='));
  if (at === -1) return undefined;
  const arg = argv[at]!;
  const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[at + 1];
  const ids = (value ?? '')
    .split(',')
    .map((id) => id.trim())
    .filter(Boolean);
  const known = SCENARIOS.map((s) => s.id);
  const unknown = ids.filter((id) => !known.includes(id));
  if (ids.length === 0 || unknown.length > 0) {
    throw new Error(
      `--only takes scenario names separated by commas: ${known.join(', ')}${unknown.length ? ` (unknown: ${unknown.join(', ')})` : ''}`,
    );
  }
  return ids;
}

async function main(): Promise<number> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    console.log(usage());
    return 0;
  }
  const smoke = process.argv.includes('--smoke');
  const only = onlyIds(process.argv);
  const env = process.env;
  let redisUrl = env.BENCH_REDIS_URL;
  let stopRedis = async () => undefined;
  if (!redisUrl) {
    const binary = await ensureRedisServerBinary((line) => console.error(line));
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hookline-bench-redis-'));
    const server = await startRedisServer({ binary, port: 0, dir, appendOnly: false });
    redisUrl = server.url;
    stopRedis = async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    };
  }

  let receiver: ReceiverProcess | undefined;
  const infoRedis = connectRedis(redisUrl, { connectionName: 'hookline-bench-info', maxRetriesPerRequest: 3 });
  let setup: DeliveryBenchSetup | undefined;
  let rate: Promise<number> | undefined;
  const url = redisUrl;
  const context: BenchContext = {
    redisUrl,
    smoke,
    env,
    e2e: undefined,
    naive: undefined,
    lean: undefined,
    async delivery() {
      if (setup) return setup;
      receiver ??= await ReceiverProcess.start();
      const events = smoke ? 500 : positiveInteger(env, 'BENCH_EVENTS', 20_000);
      setup = {
        redisUrl: url,
        infoRedis,
        receiver,
        config: engineConfig(env),
        events,
        concurrency: positiveInteger(env, 'BENCH_CONCURRENCY', 50),
        payloadBytes: positiveInteger(env, 'BENCH_PAYLOAD_BYTES', 1_024),
        vendors: 100,
        batchSize: 500,
        posters: 4,
        warmup: smoke ? 100 : positiveInteger(env, 'BENCH_WARMUP', events),
        timeoutMs: smoke ? 60_000 : Math.max(120_000, events * 10),
      };
      await warmReceiver(setup, smoke ? 1_000 : 5_000);
      return setup;
    },
    hooklineRate() {
      rate ??= (async () => {
        if (context.e2e) return context.e2e.perSecond;
        const s = await context.delivery();
        const calibration = await hooklineThroughput(s, smoke ? s.events : Math.min(s.events, 5_000));
        console.log(
          `(calibration: Hookline e2e ${perSecond(calibration.perSecond)} over ${calibration.deliveries} events, as e2e did not run)`,
        );
        return calibration.perSecond;
      })();
      return rate;
    },
  };

  const outcomes: Outcome[] = [];
  let machine: Record<string, string>;
  try {
    machine = machineDescription(await redisVersionAt(redisUrl));
    for (const scenario of SCENARIOS.filter((s) => (only === undefined ? !s.optIn : only.includes(s.id)))) {
      const startedMs = Date.now();
      try {
        const result = await scenario.run(context);
        const enforced = result.checks.find((c) => c.target === scenario.enforced);
        const passed = smoke || enforced === undefined || enforced.met !== false;
        outcomes.push({ scenario, result, error: undefined, passed });
        const notes = Object.entries(result.notes)
          .map(([label, value]) => `${label} ${value}`)
          .join(', ');
        const checks = result.checks.map((c) => `${c.target}: ${c.value} ${verdictOf(c)}`).join('; ');
        console.log(
          `${scenario.name}: ${result.size}: ${result.figures}${checks ? ` — ${checks}` : ''}${notes ? ` (${notes})` : ''} [${((Date.now() - startedMs) / 1000).toFixed(0)} s]` +
            `${passed ? '' : ` — FAIL: ${scenario.enforced} is enforced`}`,
        );
        if (result.table) console.log(result.table.join('\n'));
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        outcomes.push({ scenario, result: undefined, error: message, passed: false });
        console.error(`${scenario.name}: ERROR ${error instanceof Error ? (error.stack ?? message) : message}`);
      }
    }
  } finally {
    await receiver?.close();
    await infoRedis.quit();
    await stopRedis();
  }

  console.log(['', 'The round’s targets:', ...targetsTable(checksOf(outcomes))].join('\n'));
  if (only) {
    console.log('(--only: results not written)');
  } else {
    const date = new Date().toISOString();
    const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(path.join(resultsDir, 'latest.md'), markdown(outcomes, machine, smoke, date));
    const json = {
      date,
      smoke,
      machine,
      scenarios: outcomes.map(({ scenario, result, error, passed }) => ({
        id: scenario.id,
        name: scenario.name,
        ...(error === undefined ? {} : { error }),
        size: result?.size,
        figures: result?.figures,
        checks: result?.checks.map((c) => ({ ...c, enforced: c.target === scenario.enforced })),
        passed,
        ...result?.raw,
      })),
    };
    writeFileSync(path.join(resultsDir, 'latest.json'), `${JSON.stringify(json, null, 2)}\n`);
    console.log(`results written to ${path.relative(process.cwd(), resultsDir) || '.'}/latest.md and latest.json`);
  }
  return outcomes.every((o) => o.passed) ? 0 : 1;
}

/**
 * Every scenario closes what it opened, so the process ends by itself; should something stay open
 * (a socket, a thread, a timer), say what it is and end anyway instead of hanging the run it is part of.
 */
function exitWhenDone(code: number): void {
  process.exitCode = code;
  setTimeout(() => {
    console.error(
      `bench: still open 10 s after the run ended: ${process.getActiveResourcesInfo().join(', ')}; exiting`,
    );
    process.exit(code);
  }, 10_000).unref();
}

main().then(exitWhenDone, (error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : error);
  exitWhenDone(1);
});
