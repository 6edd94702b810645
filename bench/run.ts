/**
 * `npm run bench`: runs every scenario against a throwaway redis-server (or BENCH_REDIS_URL),
 * prints one line per scenario, writes bench/results/latest.{md,json}, and exits non-zero when a
 * full-size run misses a scenario's latency limit. `--smoke` runs small sizes and never fails on
 * latency. Sizes: BENCH_MACHINES (default 100000), BENCH_QUERIES (default 2000).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectRedis } from '../src/store/redis.js';
import { ensureRedisServerBinary, startRedisServer } from '../src/store/redis-server.js';
import { benchMachineListing } from './machines.js';

interface BenchContext {
  redisUrl: string;
  smoke: boolean;
  env: NodeJS.ProcessEnv;
}

interface ScenarioResult {
  /** What was measured, e.g. "100000 machines, 2000 queries". */
  size: string;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Further figures, shown after the latencies: label → formatted value. */
  notes: Record<string, string>;
  /** Raw figures for latest.json. */
  raw: Record<string, number>;
}

interface Scenario {
  name: string;
  /** A full-size run fails when p99 exceeds this. */
  p99LimitMs: number;
  run(context: BenchContext): Promise<ScenarioResult>;
}

function positiveInteger(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got "${text}"`);
  return value;
}

const ms = (value: number) => `${value.toFixed(value < 10 ? 2 : 1)} ms`;

const SCENARIOS: Scenario[] = [
  {
    name: 'machine listing',
    p99LimitMs: 25,
    async run({ redisUrl, smoke, env }) {
      const machines = smoke ? 2_000 : positiveInteger(env, 'BENCH_MACHINES', 100_000);
      const queries = smoke ? 200 : positiveInteger(env, 'BENCH_QUERIES', 2_000);
      const r = await benchMachineListing({ machines, queries, redisUrl });
      return {
        size: `${machines} machines, ${queries} queries, ${r.writes} writes`,
        p50Ms: r.p50Ms,
        p99Ms: r.p99Ms,
        maxMs: r.maxMs,
        notes: { 'first load': ms(r.firstLoadMs), mean: ms(r.meanMs), seed: `${r.seedSeconds.toFixed(1)} s` },
        raw: { machines, queries, ...r },
      };
    },
  },
];

interface Outcome {
  scenario: Scenario;
  result: ScenarioResult;
  passed: boolean;
}

function machineDescription(redisVersion: string): Record<string, string> {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: String(cpus.length),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    redis: redisVersion,
  };
}

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
    `| Node | ${machine.node} |`,
    `| OS | ${machine.platform} |`,
    `| Redis | ${machine.redis} |`,
    '',
    '| Scenario | Size | p50 | p99 | max | p99 limit | Result | Other figures |',
    '|---|---|---:|---:|---:|---:|---|---|',
  ];
  for (const { scenario, result, passed } of outcomes) {
    const notes = Object.entries(result.notes).map(([label, value]) => `${label} ${value}`).join(', ');
    lines.push(
      `| ${scenario.name} | ${result.size} | ${ms(result.p50Ms)} | ${ms(result.p99Ms)} | ${ms(result.maxMs)} | ${scenario.p99LimitMs} ms | ${passed ? 'pass' : 'FAIL'} | ${notes} |`,
    );
  }
  lines.push('', 'Listing latencies are client-side HTTP requests over loopback to the real admin API (auth, filter parsing, catch-up round trip, matching, page fetch, serialization), first call excluded.', '');
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

async function main(): Promise<number> {
  const smoke = process.argv.includes('--smoke');
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

  const outcomes: Outcome[] = [];
  let machine: Record<string, string>;
  try {
    machine = machineDescription(await redisVersionAt(redisUrl));
    for (const scenario of SCENARIOS) {
      const result = await scenario.run({ redisUrl, smoke, env });
      const passed = smoke || result.p99Ms <= scenario.p99LimitMs;
      outcomes.push({ scenario, result, passed });
      const notes = Object.entries(result.notes).map(([label, value]) => `${label} ${value}`).join(', ');
      console.log(
        `${scenario.name}: ${result.size}: p50 ${ms(result.p50Ms)}, p99 ${ms(result.p99Ms)}, max ${ms(result.maxMs)}, ${notes}` +
          `${passed ? '' : ` — FAIL: p99 above ${scenario.p99LimitMs} ms`}`,
      );
    }
  } finally {
    await stopRedis();
  }

  const date = new Date().toISOString();
  const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(path.join(resultsDir, 'latest.md'), markdown(outcomes, machine, smoke, date));
  const json = {
    date,
    smoke,
    machine,
    scenarios: outcomes.map(({ scenario, result, passed }) => ({
      name: scenario.name,
      size: result.size,
      p99LimitMs: scenario.p99LimitMs,
      passed,
      ...result.raw,
    })),
  };
  writeFileSync(path.join(resultsDir, 'latest.json'), `${JSON.stringify(json, null, 2)}\n`);
  console.log(`results written to ${path.relative(process.cwd(), resultsDir) || '.'}/latest.md and latest.json`);
  return outcomes.every((o) => o.passed) ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    process.exitCode = 1;
  },
);
