import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Machine } from '../src/domain/machine.js';
import { pino } from 'pino';
import { Pool } from 'undici';
import { loadConfig } from '../src/config/env.js';
import { createEngine } from '../src/engine/index.js';
import { redisKeys } from '../src/store/keys.js';
import { RedisMachineStore } from '../src/store/machines.js';
import { connectRedis, type Redis } from '../src/store/redis.js';
import { redisCpuUs } from './redis-info.js';

export interface MachineListingBenchOptions {
  machines: number;
  queries: number;
  redisUrl: string;
}

export interface MachineListingBenchResult {
  /** Latency of `GET /rental/v1/machines` over loopback HTTP (the first call excluded): auth, parsing, catch-up, matching, page fetch, serialization. */
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
  /** Wall time to seed the machines through RedisMachineStore.apply, in batches as ingest writes them. */
  seedSeconds: number;
  /** Machine changes the seed applied per second, and Redis CPU per change: all on the listing's one slot. */
  seedChangesPerSecond: number;
  seedRedisCpuUsPerChange: number;
  /** The first list(): a full reload of the in-memory index. */
  firstLoadMs: number;
  /** Writes made between timed queries, which each following list() had to catch up with. */
  writes: number;
}

/** Changes per apply() while seeding (an ingest request of 500 machine events writes them so), and applies in flight. */
const SEED_BATCH = 500;
const SEED_CONCURRENCY = 4;
/** One write (update, create or removal) before every this many queries. */
const QUERIES_PER_WRITE = 10;

interface GpuModel {
  name: string;
  memory: number;
  cuda_cores: number;
  tensor_cores: number;
  flops: number;
}

const GPU_MODELS: readonly GpuModel[] = [
  { name: 'NVIDIA GeForce RTX 4090', memory: 24, cuda_cores: 16384, tensor_cores: 512, flops: 83 },
  { name: 'NVIDIA GeForce RTX 4080', memory: 16, cuda_cores: 9728, tensor_cores: 304, flops: 49 },
  { name: 'NVIDIA GeForce RTX 3090', memory: 24, cuda_cores: 10496, tensor_cores: 328, flops: 36 },
  { name: 'NVIDIA GeForce RTX 3080', memory: 10, cuda_cores: 8704, tensor_cores: 272, flops: 30 },
  { name: 'NVIDIA RTX A6000', memory: 48, cuda_cores: 10752, tensor_cores: 336, flops: 39 },
  { name: 'NVIDIA RTX 6000 Ada Generation', memory: 48, cuda_cores: 18176, tensor_cores: 568, flops: 91 },
  { name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
  { name: 'NVIDIA A100-SXM4-40GB', memory: 40, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
  { name: 'NVIDIA H100', memory: 80, cuda_cores: 16896, tensor_cores: 528, flops: 989 },
  { name: 'NVIDIA H100 PCIe', memory: 80, cuda_cores: 14592, tensor_cores: 456, flops: 756 },
  { name: 'NVIDIA L40S', memory: 48, cuda_cores: 18176, tensor_cores: 568, flops: 362 },
  { name: 'NVIDIA L4', memory: 24, cuda_cores: 7424, tensor_cores: 240, flops: 121 },
  { name: 'Tesla T4', memory: 16, cuda_cores: 2560, tensor_cores: 320, flops: 65 },
  { name: 'Tesla V100-SXM2-32GB', memory: 32, cuda_cores: 5120, tensor_cores: 640, flops: 125 },
];

const CPU_MODELS: ReadonlyArray<{ model: string; cores: number; base: number; boost: number }> = [
  { model: 'AMD EPYC 7763 64-Core Processor', cores: 64, base: 2450, boost: 3500 },
  { model: 'AMD EPYC 9654 96-Core Processor', cores: 96, base: 2400, boost: 3700 },
  { model: 'AMD EPYC 7543 32-Core Processor', cores: 32, base: 2800, boost: 3700 },
  { model: 'Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz', cores: 32, base: 2000, boost: 3200 },
  { model: 'Intel(R) Xeon(R) Platinum 8480+', cores: 56, base: 2000, boost: 3800 },
  { model: 'Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz', cores: 16, base: 2400, boost: 3400 },
  { model: 'AMD Ryzen 9 7950X 16-Core Processor', cores: 16, base: 4500, boost: 5700 },
  { model: 'AMD Ryzen Threadripper PRO 5995WX 64-Cores', cores: 64, base: 2700, boost: 4500 },
  { model: 'Intel(R) Core(TM) i9-13900K', cores: 24, base: 3000, boost: 5800 },
];

const MEMORY_GB = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024];
const PLACES = [
  ['United States', 'Ashburn'],
  ['United States', 'San Jose'],
  ['Germany', 'Frankfurt'],
  ['Netherlands', 'Amsterdam'],
  ['Finland', 'Helsinki'],
  ['Japan', 'Tokyo'],
  ['Singapore', 'Singapore'],
  ['Canada', 'Montreal'],
] as const;
const CURRENCIES = ['USD', 'EUR', 'USDC', 'BTC'];

/** A small deterministic PRNG (mulberry32), so every run benchmarks the same fleet and query order. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function pick<T>(rnd: () => number, items: readonly T[]): T {
  return items[Math.floor(rnd() * items.length)]!;
}

/** Distinct, unordered-looking ids: a multiplicative hash is a bijection on 32-bit integers. */
function machineId(n: number): string {
  return `m-${(Math.imul(n + 1, 2_654_435_761) >>> 0).toString(16).padStart(8, '0')}`;
}

function syntheticMachine(rnd: () => number, id: string): Machine {
  const roll = rnd();
  const gpuCount = roll < 0.05 ? 0 : roll < 0.55 ? 1 : roll < 0.75 ? 2 : roll < 0.9 ? 4 : 8;
  const main = pick(rnd, GPU_MODELS);
  // A few machines mix models, e.g. a display card beside compute cards.
  const mixed = gpuCount > 1 && rnd() < 0.1 ? pick(rnd, GPU_MODELS) : main;
  const gpus = Array.from({ length: gpuCount }, (_, i) => {
    const model = i === gpuCount - 1 ? mixed : main;
    return {
      id: `${id}-gpu${i}`,
      name: model.name,
      memory: model.memory,
      cuda_cores: model.cuda_cores,
      tensor_cores: model.tensor_cores,
      flops: model.flops,
    };
  });
  const cpu = pick(rnd, CPU_MODELS);
  const [country, city] = pick(rnd, PLACES);
  const prices = Array.from({ length: 1 + Math.floor(rnd() * 3) }, (_, i) => ({
    id: `${id}-p${i}`,
    amount: (0.1 + rnd() * 4 * Math.max(gpuCount, 1)).toFixed(4),
    currency: pick(rnd, CURRENCIES),
  }));
  return {
    status: rnd() < 0.8 ? 'available' : 'unavailable',
    metadata: {
      machine_id: id,
      geo_location: { country, city },
      cuda_version: pick(rnd, ['11.8', '12.1', '12.2', '12.4', '12.6']),
    },
    hardware_specs: {
      cpu: {
        model: cpu.model,
        cpu_arch: 'x86_64',
        cores: cpu.cores,
        threads: cpu.cores * 2,
        base_clock: cpu.base,
        boost_clock: cpu.boost,
      },
      memory: { total_memory: pick(rnd, MEMORY_GB), memory_required: 4 },
      storage: {
        disk_space_available: 100 + Math.floor(rnd() * 7900),
        disk_type: pick(rnd, ['NVMe', 'SSD', 'HDD']),
        disk_name: 'nvme0n1',
      },
      gpus,
    },
    network_info: { bandwidth: pick(rnd, [1000, 2500, 10000, 25000]) },
    machine_prices: prices,
  };
}

interface QueryShape {
  filter: string;
  page: number;
  pageSize: number;
}

/** The query mix: single and combined filters, first and deep pages, page sizes 20 and 100. */
function queryMix(someMachineId: string, machines: number): QueryShape[] {
  const deep = (pageSize: number, share: number) => Math.max(1, Math.floor((machines * share) / pageSize));
  return [
    { filter: '', page: 1, pageSize: 20 },
    { filter: '', page: deep(20, 0.9), pageSize: 20 },
    { filter: 'gpu_name:rtx 4090', page: 1, pageSize: 20 },
    { filter: 'gpu_name:Nvidia%20RTX%203090', page: 1, pageSize: 100 },
    { filter: 'gpu_name:a100,memory_size:256GB', page: 1, pageSize: 100 },
    {
      filter: 'gpu_name:h100,status:available,memory_size:64GB,cpu_cores:16,storage_size:500GB',
      page: 2,
      pageSize: 20,
    },
    { filter: 'machine_status:available', page: deep(20, 0.5), pageSize: 20 },
    { filter: 'status:unavailable', page: 10, pageSize: 100 },
    { filter: 'cpu_name:epyc,storage_size:2000GB', page: 1, pageSize: 20 },
    { filter: 'cpu_name:xeon,cpu_cores:32', page: deep(100, 0.1), pageSize: 100 },
    { filter: 'memory_size:512GB', page: 3, pageSize: 100 },
    { filter: 'gpu_name:nvidia', page: deep(100, 0.7), pageSize: 100 },
    { filter: 'gpu_name:tesla,gpu_name:v100,status:available', page: 1, pageSize: 20 },
    { filter: `machine_id:${someMachineId}`, page: 1, pageSize: 20 },
    { filter: 'gpu_name:mi300x', page: 1, pageSize: 20 },
  ];
}

function percentile(sortedMs: readonly number[], share: number): number {
  if (sortedMs.length === 0) return 0;
  const rank = Math.min(sortedMs.length - 1, Math.max(0, Math.ceil(share * sortedMs.length) - 1));
  return sortedMs[rank]!;
}

async function deleteKeys(redis: Redis, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    if (keys.length > 0) await redis.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/**
 * Seeds `machines` synthetic machines through one store (the ingest side) and times `queries`
 * `GET /rental/v1/machines` requests against the real admin API listening on loopback, whose store has
 * its own connection, with a write before every tenth query so the change-stream catch-up is part of
 * what is measured.
 */
export async function benchMachineListing(opts: MachineListingBenchOptions): Promise<MachineListingBenchResult> {
  const prefix = `bench${randomBytes(4).toString('hex')}`;
  const keys = redisKeys(prefix);
  const writerRedis = connectRedis(opts.redisUrl, {
    connectionName: `hookline-bench-${prefix}-writer`,
    maxRetriesPerRequest: 3,
  });
  const writer = new RedisMachineStore(writerRedis, keys);
  // The API as it runs in production (role api), reading what the writer stores.
  const engine = await createEngine(
    {
      ...loadConfig({}),
      redisUrl: opts.redisUrl,
      secretKey: randomBytes(32),
      redisPrefix: prefix,
      apiHost: '127.0.0.1',
      apiPort: 0,
      rateLimitPerSecond: 0,
    },
    { role: 'api', logger: pino({ level: 'silent' }), listen: true },
  );
  const apiKeys = engine.stores.apiKeys;
  const origin = (await engine.start()).api!;
  const http = new Pool(origin, { connections: 1 });
  const { key } = await apiKeys.create({ name: 'bench', roles: ['machines:read'] });
  const get = async (shape: QueryShape) => {
    const query = `filter=${shape.filter.replaceAll(' ', '%20')}&page=${shape.page}&page_size=${shape.pageSize}`;
    const res = await http.request({
      method: 'GET',
      path: `/rental/v1/machines?${query}`,
      headers: { 'x-api-key': key },
    });
    const body = (await res.body.json()) as { total: number };
    if (res.statusCode !== 200 && res.statusCode !== 404)
      throw new Error(`listing answered ${res.statusCode}: ${JSON.stringify(body)}`);
    return body;
  };
  const rnd = random(0x5eed);
  let versionMs = 1_700_000_000_000;
  try {
    // 1. Seed, in batches of changes as ingest applies them.
    const redisCpu0 = await redisCpuUs(writerRedis);
    const seedStart = performance.now();
    let next = 0;
    const seedWorker = async () => {
      while (next < opts.machines) {
        const first = next;
        next = Math.min(opts.machines, next + SEED_BATCH);
        const changes = Array.from({ length: next - first }, (_, i) => ({
          kind: 'upsert' as const,
          machine: syntheticMachine(rnd, machineId(first + i)),
          versionMs,
        }));
        await writer.apply(changes);
      }
    };
    await Promise.all(Array.from({ length: SEED_CONCURRENCY }, seedWorker));
    const seedSeconds = (performance.now() - seedStart) / 1000;
    const seedRedisCpuUsPerChange = ((await redisCpuUs(writerRedis)) - redisCpu0) / opts.machines;

    // 2. First list: the full reload.
    const loadStart = performance.now();
    const first = await get({ filter: '', page: 1, pageSize: 20 });
    const firstLoadMs = performance.now() - loadStart;
    if (first.total !== opts.machines)
      throw new Error(`seeded ${opts.machines} machines but the listing counts ${first.total}`);

    // 3. Timed queries, with writes in between (not timed) that the next list() catches up with.
    const mix = queryMix(machineId(Math.floor(opts.machines / 2)), opts.machines);
    const durationsMs: number[] = [];
    let created = opts.machines;
    let writes = 0;
    for (let q = 0; q < opts.queries; q += 1) {
      if (q % QUERIES_PER_WRITE === QUERIES_PER_WRITE - 1) {
        versionMs += 1;
        writes += 1;
        const roll = rnd();
        if (roll < 0.7) await writer.upsert(syntheticMachine(rnd, machineId(Math.floor(rnd() * created))), versionMs);
        else if (roll < 0.9) await writer.upsert(syntheticMachine(rnd, machineId(created++)), versionMs);
        else await writer.remove(machineId(Math.floor(rnd() * created)), versionMs);
      }
      const shape = mix[q % mix.length]!;
      const start = performance.now();
      await get(shape);
      durationsMs.push(performance.now() - start);
    }

    const sorted = [...durationsMs].sort((a, b) => a - b);
    return {
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      maxMs: sorted.at(-1) ?? 0,
      meanMs: sorted.reduce((sum, ms) => sum + ms, 0) / Math.max(sorted.length, 1),
      seedSeconds,
      seedChangesPerSecond: opts.machines / seedSeconds,
      seedRedisCpuUsPerChange,
      firstLoadMs,
      writes,
    };
  } finally {
    await http.close();
    writer.close();
    await deleteKeys(writerRedis, keys.all);
    await engine.close(0);
    await writerRedis.quit().catch(() => undefined);
  }
}
