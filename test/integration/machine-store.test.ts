import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Machine } from '../../src/domain/machine.js';
import { parseMachineFilter, type MachineFilter } from '../../src/domain/machine-filter.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { RedisMachineStore, type MachineChange } from '../../src/store/machines.js';
import { connectRedis, type Redis } from '../../src/store/redis.js';
import { lcg } from '../helpers/random.js';
import { commandsNaming, testRedis, type TestRedis } from '../helpers/redis.js';

interface Shape {
  status?: string;
  memory?: number;
  cores?: number;
  storage?: number;
  cpu?: string;
  gpus?: string[];
}

function machine(id: string, shape: Shape = {}): Machine {
  const bare =
    shape.memory === undefined && shape.cores === undefined && shape.cpu === undefined && shape.gpus === undefined;
  return {
    status: shape.status ?? 'available',
    metadata: { machine_id: id, geo_location: { country: 'Germany', city: 'Berlin' }, cuda_version: '12.4' },
    ...(bare
      ? {}
      : {
          hardware_specs: {
            cpu: {
              model: shape.cpu ?? 'Generic CPU',
              cpu_arch: 'x86_64',
              cores: shape.cores ?? 1,
              threads: (shape.cores ?? 1) * 2,
            },
            memory: { total_memory: shape.memory ?? 1, memory_required: 1 },
            storage: { disk_space_available: shape.storage ?? 10, disk_type: 'NVMe', disk_name: 'nvme0n1' },
            gpus: (shape.gpus ?? []).map((name, i) => ({ id: `${id}-gpu-${i}`, name, memory: 24 })),
          },
        }),
    network_info: { bandwidth: 1000 },
    machine_prices: [{ id: `${id}-price`, amount: '1.25', currency: 'USD' }],
  };
}

/** A small fleet covering every filter; inserted out of order on purpose. */
const FLEET: Machine[] = [
  machine('m-04', {
    memory: 16,
    cores: 4,
    storage: 250,
    cpu: 'Intel Core i9-13900K',
    gpus: ['NVIDIA GeForce RTX 4090', 'NVIDIA GeForce RTX 3090'],
  }),
  machine('m-01', {
    memory: 32,
    cores: 8,
    storage: 500,
    cpu: 'Intel Xeon Gold 6338',
    gpus: ['NVIDIA GeForce RTX 3090'],
  }),
  machine('m-07', {
    status: 'unavailable',
    memory: 256,
    cores: 64,
    storage: 4000,
    cpu: 'Intel Xeon Platinum 8480+',
    gpus: ['NVIDIA H100', 'NVIDIA A100 40GB'],
  }),
  machine('m-02', {
    memory: 64,
    cores: 16,
    storage: 1000,
    cpu: 'AMD EPYC 7763',
    gpus: ['NVIDIA A100 80GB PCIe', 'NVIDIA A100 80GB PCIe'],
  }),
  machine('m-06'),
  machine('m-03', {
    status: 'unavailable',
    memory: 128,
    cores: 32,
    storage: 2000,
    cpu: 'AMD EPYC 9654',
    gpus: ['NVIDIA H100'],
  }),
  machine('m-05', { memory: 24, cores: 12, storage: 100, cpu: 'AMD Ryzen 9 7950X', gpus: [] }),
];

function filter(text: string | string[] = ''): MachineFilter {
  const parsed = parseMachineFilter(text);
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.filter;
}

const ids = (machines: Machine[]) => machines.map((m) => m.metadata.machine_id);

let t: TestRedis;
let keys: RedisKeys;
let store: RedisMachineStore;
const extraConnections: Redis[] = [];

/** A second connection to the same Redis, as another process would have. */
function otherConnection(): Redis {
  const redis = connectRedis(t.url, { connectionName: `hookline-test-${t.prefix}-b`, maxRetriesPerRequest: 3 });
  extraConnections.push(redis);
  return redis;
}

async function seed(target: RedisMachineStore, machines: Machine[], versionMs = 1_000): Promise<void> {
  for (const m of machines) expect(await target.upsert(m, versionMs)).toBe('applied');
}

async function allIds(target: RedisMachineStore, text: string | string[] = ''): Promise<string[]> {
  const page = await target.list({ filter: filter(text), page: 1, pageSize: 100_000 });
  expect(page.machines).toHaveLength(page.total);
  return ids(page.machines);
}

/** The most commands (those inside its script included) one apply() call of up to 250 changes may run. */
const MACHINE_APPLY_COMMANDS_MAX = 14;

beforeEach(() => {
  t = testRedis();
  keys = redisKeys(t.prefix);
  store = new RedisMachineStore(t.redis, keys);
});

afterEach(async () => {
  store.close();
  await Promise.all(extraConnections.splice(0).map((redis) => redis.quit()));
  await t.cleanup();
});

describe('RedisMachineStore writes', () => {
  it('stores a machine and reads it back whole', async () => {
    const m = FLEET[0]!;
    expect(await store.upsert(m, 1_000)).toBe('applied');
    expect(await store.get('m-04')).toEqual(m);
    expect(await store.get('m-99')).toBeUndefined();
  });

  it('keeps documents, index records, versions and the change stream under one hash tag', async () => {
    await store.upsert(FLEET[0]!, 1_700_000_000_000);
    const tag = `{${t.prefix}:machines}`;
    for (const key of [keys.machines.docs, keys.machines.index, keys.machines.versions, keys.machines.changes]) {
      expect(key.startsWith(tag)).toBe(true);
    }
    expect(JSON.parse((await t.redis.hget(keys.machines.index, 'm-04'))!)).toEqual({
      s: 'available',
      m: 16,
      c: 4,
      d: 250,
      cpu: 'Intel Core i9-13900K',
      gpu: ['NVIDIA GeForce RTX 4090', 'NVIDIA GeForce RTX 3090'],
    });
    expect(await t.redis.hget(keys.machines.versions, 'm-04')).toBe('1700000000000');
    const entries = await t.redis.xrange(keys.machines.changes, '-', '+');
    expect(entries.map(([, fields]) => fields)).toEqual([['id', 'm-04']]);
  });

  it('applies a batch of changes in order in one call, naming every changed machine in one stream entry', async () => {
    await store.upsert(machine('m-2'), 1_000);
    const results = await store.apply([
      { kind: 'upsert', machine: machine('m-1', { memory: 64 }), versionMs: 2_000 },
      { kind: 'upsert', machine: machine('m-1', { memory: 8 }), versionMs: 1_999 },
      { kind: 'remove', machineId: 'm-2', versionMs: 2_000 },
      { kind: 'remove', machineId: 'm-3', versionMs: 2_000 },
      { kind: 'upsert', machine: machine('m-3'), versionMs: 1_500 },
      { kind: 'upsert', machine: machine('m-4'), versionMs: 2_000 },
    ]);
    expect(results).toEqual(['applied', 'stale', 'applied', 'missing', 'stale', 'applied']);
    expect((await store.get('m-1'))?.hardware_specs?.memory?.total_memory).toBe(64);
    expect(await store.get('m-2')).toBeUndefined();
    expect(await store.get('m-3')).toBeUndefined();
    const entries = await t.redis.xrange(keys.machines.changes, '-', '+');
    expect(entries.map(([, fields]) => fields)).toEqual([
      ['id', 'm-2'],
      ['id', 'm-1', 'id', 'm-2', 'id', 'm-4'],
    ]);
    // A listing process catches up from the stream: it sees the batch as applied.
    const page = await store.list({ filter: filter(), page: 1, pageSize: 10 });
    expect(page.machines.map((m) => m.metadata.machine_id)).toEqual(['m-1', 'm-4']);
  });

  it('ignores a write older than the stored version and applies an equal one', async () => {
    const newer = machine('m-1', { status: 'unavailable', memory: 64 });
    expect(await store.upsert(newer, 2_000)).toBe('applied');
    expect(await store.upsert(machine('m-1', { memory: 8 }), 1_999)).toBe('stale');
    expect(await store.get('m-1')).toEqual(newer);
    expect(await t.redis.xlen(keys.machines.changes)).toBe(1);

    const same = machine('m-1', { memory: 128 });
    expect(await store.upsert(same, 2_000)).toBe('applied');
    expect(await store.get('m-1')).toEqual(same);
    expect(await store.upsert(same, 2_000)).toBe('applied');
    expect(await store.get('m-1')).toEqual(same);
  });

  it('removes a machine and keeps a tombstone so an older create cannot bring it back', async () => {
    await store.upsert(machine('m-1'), 1_000);
    await store.upsert(machine('m-2'), 1_000);
    expect(await allIds(store)).toEqual(['m-1', 'm-2']);

    expect(await store.remove('m-1', 900)).toBe('stale');
    expect(await store.get('m-1')).toBeDefined();

    expect(await store.remove('m-1', 2_000)).toBe('applied');
    expect(await store.get('m-1')).toBeUndefined();
    expect(await t.redis.hexists(keys.machines.index, 'm-1')).toBe(0);
    expect(await allIds(store)).toEqual(['m-2']);

    expect(await store.upsert(machine('m-1'), 1_500)).toBe('stale');
    expect(await store.get('m-1')).toBeUndefined();
    expect(await allIds(store)).toEqual(['m-2']);

    expect(await store.remove('m-1', 2_000)).toBe('missing');
    expect(await store.upsert(machine('m-1', { status: 'unavailable' }), 3_000)).toBe('applied');
    expect((await store.get('m-1'))?.status).toBe('unavailable');
    expect(await allIds(store)).toEqual(['m-1', 'm-2']);
  });

  it('records a removal that arrives before the create it follows', async () => {
    expect(await store.remove('m-9', 5_000)).toBe('missing');
    expect(await store.upsert(machine('m-9'), 4_000)).toBe('stale');
    expect(await store.get('m-9')).toBeUndefined();
    expect(await store.upsert(machine('m-9'), 6_000)).toBe('applied');
  });

  it('forgets tombstones older than the TTL when a later removal runs', async () => {
    let now = 10_000;
    const aging = new RedisMachineStore(t.redis, keys, { tombstoneTtlMs: 1_000, nowMs: () => now });
    await aging.upsert(machine('old'), 9_000);
    expect(await aging.remove('old', 9_500)).toBe('applied');
    expect(await t.redis.zscore(keys.machines.tombstones, 'old')).toBe('9500');

    now = 10_400; // horizon 9_400: the tombstone (9_500) is still young
    expect(await aging.remove('other', 10_400)).toBe('missing');
    expect(await t.redis.hget(keys.machines.versions, 'old')).toBe('9500');

    now = 20_000; // horizon 19_000: both tombstones so far are expired
    expect(await aging.remove('third', 20_000)).toBe('missing');
    expect(await t.redis.hget(keys.machines.versions, 'old')).toBeNull();
    expect(await t.redis.hget(keys.machines.versions, 'other')).toBeNull();
    expect(await t.redis.zrange(keys.machines.tombstones, 0, -1)).toEqual(['third']);
    // Past the TTL an old create is accepted again: the documented bound of the guarantee.
    expect(await aging.upsert(machine('old'), 9_000)).toBe('applied');
    expect(await t.redis.zscore(keys.machines.tombstones, 'old')).toBeNull();
  });

  it('writes a batch with a fixed number of commands on the listing’s slot, however many changes it holds', async () => {
    let now = 1_000_000;
    const aging = new RedisMachineStore(t.redis, keys, { tombstoneTtlMs: 10_000, nowMs: () => now });
    // Stored before counting: 60 machines, 20 tombstones that will have expired, and the script loaded.
    const fleet = Array.from({ length: 60 }, (_, i) => machine(`c-${String(i).padStart(3, '0')}`, { memory: i }));
    await aging.apply(fleet.map((m) => ({ kind: 'upsert', machine: m, versionMs: 1_000 })));
    await aging.apply(
      Array.from({ length: 20 }, (_, i) => ({ kind: 'remove', machineId: `gone-${i}`, versionMs: 2_000 })),
    );
    now = 2_000_000;

    // Every kind of change: updates, stale updates, removals that apply or find nothing, in the
    // large batch three changes of each machine and new ones; expired tombstones are dropped on the way.
    const batch = (size: number, versionMs: number): MachineChange[] =>
      Array.from({ length: size }, (_, i): MachineChange => {
        const id = `c-${String(i % 80).padStart(3, '0')}`;
        switch (i % 5) {
          case 0:
            return { kind: 'remove', machineId: id, versionMs };
          case 1:
            return { kind: 'remove', machineId: `never-${i}`, versionMs };
          case 2:
            return { kind: 'upsert', machine: machine(id, { memory: 999 }), versionMs: 500 };
          default:
            return { kind: 'upsert', machine: machine(id, { status: 'unavailable' }), versionMs };
        }
      });
    const tag = `{${t.prefix}:machines}`;
    const small = await commandsNaming(t.redis, tag, () => aging.apply(batch(10, 3_000)));
    const large = await commandsNaming(t.redis, tag, () => aging.apply(batch(240, 4_000)));
    console.log(
      `machine read model commands per call: ${small.length} for 10 changes, ${large.length} for 240 (${large.join(' ')})`,
    );
    // One EVALSHA, and inside it at most one command per key and kind of access.
    expect(small.length).toBeLessThanOrEqual(MACHINE_APPLY_COMMANDS_MAX);
    expect(large.length).toBeLessThanOrEqual(MACHINE_APPLY_COMMANDS_MAX);
    expect(await t.redis.zcount(keys.machines.tombstones, '-inf', '2999')).toBe(0);
    expect(await t.redis.hexists(keys.machines.versions, 'gone-0')).toBe(0);
    expect((await store.get('c-003'))?.status).toBe('unavailable');
    expect((await store.get('c-002'))?.hardware_specs?.memory?.total_memory).toBe(2);
    expect(await store.get('c-000')).toBeUndefined();
    expect((await store.get('c-079'))?.status).toBe('unavailable');
  });

  it('applies random batches exactly as one change at a time would, in Redis and in the listing', async () => {
    const random = lcg(20_240_611);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const machineIds = ['r-1', 'r-2', 'r-3', 'r-4', 'r-5', 'r-6'];
    // A clock at the versions' time: no tombstone expires during the test.
    const writer = new RedisMachineStore(t.redis, keys, { nowMs: () => 2_000 });
    // The model: each change on its own, in order, against what the changes before it left.
    const docs = new Map<string, Machine>();
    const versions = new Map<string, number>();
    const tombstones = new Map<string, number>();
    const applyOne = (change: MachineChange): string => {
      const id = change.kind === 'upsert' ? change.machine.metadata.machine_id : change.machineId;
      if ((versions.get(id) ?? -Infinity) > change.versionMs) return 'stale';
      versions.set(id, change.versionMs);
      if (change.kind === 'upsert') {
        docs.set(id, change.machine);
        tombstones.delete(id);
        return 'applied';
      }
      tombstones.set(id, change.versionMs);
      return docs.delete(id) ? 'applied' : 'missing';
    };
    for (let round = 0; round < 40; round += 1) {
      const changes = Array.from({ length: 1 + Math.floor(random() * 30) }, (_, i): MachineChange => {
        const id = pick(machineIds);
        // Few distinct versions, so equal and older ones are frequent.
        const versionMs = 1_000 + Math.floor(random() * 8) * 100;
        return random() < 0.35
          ? { kind: 'remove', machineId: id, versionMs }
          : {
              kind: 'upsert',
              machine: machine(id, { memory: round * 100 + i, status: pick(['available', 'unavailable']) }),
              versionMs,
            };
      });
      expect(await writer.apply(changes)).toEqual(changes.map(applyOne));
      const storedDocs = Object.entries(await t.redis.hgetall(keys.machines.docs));
      expect(new Map(storedDocs.map(([id, json]) => [id, JSON.parse(json) as Machine]))).toEqual(docs);
      expect(Object.keys(await t.redis.hgetall(keys.machines.index)).sort()).toEqual([...docs.keys()].sort());
      expect(
        new Map(Object.entries(await t.redis.hgetall(keys.machines.versions)).map(([id, v]) => [id, Number(v)])),
      ).toEqual(versions);
      const storedTombstones = await t.redis.zrange(keys.machines.tombstones, 0, -1, 'WITHSCORES');
      expect(
        new Map(
          Array.from({ length: storedTombstones.length / 2 }, (_, i) => [
            storedTombstones[2 * i]!,
            Number(storedTombstones[2 * i + 1]),
          ]),
        ),
      ).toEqual(tombstones);
      // The listing, kept up from the change stream, shows the same machines.
      const listed = await writer.list({ filter: filter(), page: 1, pageSize: 100 });
      expect(listed.machines).toEqual([...docs.keys()].sort().map((id) => docs.get(id)));
    }
  });

  it('rejects a version that is not a finite number', async () => {
    await expect(store.upsert(machine('m-1'), Number.NaN)).rejects.toThrow(TypeError);
    await expect(store.remove('m-1', Number.POSITIVE_INFINITY)).rejects.toThrow(TypeError);
  });
});

describe('RedisMachineStore listing', () => {
  beforeEach(async () => {
    await seed(store, FLEET);
  });

  it('lists every machine in machine id order with documents intact', async () => {
    const page = await store.list({ filter: filter(), page: 1, pageSize: 20 });
    expect(page.total).toBe(7);
    expect(page.unknownMachineId).toBe(false);
    expect(ids(page.machines)).toEqual(['m-01', 'm-02', 'm-03', 'm-04', 'm-05', 'm-06', 'm-07']);
    expect(page.machines[3]).toEqual(FLEET[0]);
  });

  it('orders by machine id code units, not by number or locale', async () => {
    await seed(store, [machine('a'), machine('B'), machine('10'), machine('9')]);
    expect(await allIds(store)).toEqual(['10', '9', 'B', 'a', 'm-01', 'm-02', 'm-03', 'm-04', 'm-05', 'm-06', 'm-07']);
  });

  it.each<[string, string[]]>([
    ['gpu_name:rtx 3090', ['m-01', 'm-04']],
    ['gpu_name:NVIDIA GeForce RTX 4090', ['m-04']],
    ['gpu_name:a100', ['m-02', 'm-07']],
    ['gpu_name:Nvidia%20H100', ['m-03', 'm-07']],
    ['gpu_name:nvidia', ['m-01', 'm-02', 'm-03', 'm-04', 'm-07']],
    ['gpu_name:rtx 5090', []],
    ['cpu_name:epyc', ['m-02', 'm-03']],
    ['cpu_name:INTEL XEON', ['m-01', 'm-07']],
    ['memory_size:64GB', ['m-02', 'm-03', 'm-07']],
    ['memory_size:65', ['m-03', 'm-07']],
    ['memory_size:0GB', ['m-01', 'm-02', 'm-03', 'm-04', 'm-05', 'm-07']],
    ['cpu_cores:16', ['m-02', 'm-03', 'm-07']],
    ['storage_size:1000GB', ['m-02', 'm-03', 'm-07']],
    ['storage_size:1001 gb', ['m-03', 'm-07']],
    ['machine_status:available', ['m-01', 'm-02', 'm-04', 'm-05', 'm-06']],
    ['status:unavailable', ['m-03', 'm-07']],
    ['status:Available', []],
    ['status:retired', []],
    ['machine_id:m-05', ['m-05']],
  ])('filter %s', async (text, expected) => {
    expect(await allIds(store, text)).toEqual(expected);
  });

  it('matches a multi-GPU machine when any of its GPUs matches, each needle on its own GPU', async () => {
    expect(await allIds(store, 'gpu_name:4090,gpu_name:3090')).toEqual(['m-04']);
    expect(await allIds(store, 'gpu_name:h100,gpu_name:a100 40gb')).toEqual(['m-07']);
  });

  it.each<[string | string[], string[]]>([
    ['gpu_name:nvidia,memory_size:32GB,status:available', ['m-01', 'm-02']],
    ['cpu_name:amd,cpu_cores:16,storage_size:1500', ['m-03']],
    [['gpu_name:h100', 'machine_status:available'], []],
    [['cpu_name:intel', 'cpu_name:core'], ['m-04']],
    ['machine_id:m-02,gpu_name:a100,memory_size:64GB', ['m-02']],
    ['machine_id:m-02,status:unavailable', []],
    ['status:available,status:unavailable', []],
  ])('ANDs several conditions: %s', async (text, expected) => {
    expect(await allIds(store, text)).toEqual(expected);
  });

  it('pages through the result with a stable order and the full total on every page', async () => {
    const pages = [];
    for (const page of [1, 2, 3, 4, 50]) pages.push(await store.list({ filter: filter(), page, pageSize: 3 }));
    expect(pages.map((p) => p.total)).toEqual([7, 7, 7, 7, 7]);
    expect(pages.map((p) => ids(p.machines))).toEqual([
      ['m-01', 'm-02', 'm-03'],
      ['m-04', 'm-05', 'm-06'],
      ['m-07'],
      [],
      [],
    ]);

    const filtered = await store.list({ filter: filter('gpu_name:nvidia'), page: 2, pageSize: 2 });
    expect(filtered.total).toBe(5);
    expect(ids(filtered.machines)).toEqual(['m-03', 'm-04']);
    const pastEnd = await store.list({ filter: filter('gpu_name:nvidia'), page: 4, pageSize: 2 });
    expect(pastEnd).toEqual({ total: 5, machines: [], unknownMachineId: false });
  });

  it('flags a machine_id filter that names no known machine', async () => {
    expect(await store.list({ filter: filter('machine_id:m-99'), page: 1, pageSize: 20 })).toEqual({
      total: 0,
      machines: [],
      unknownMachineId: true,
    });
    expect(
      (await store.list({ filter: filter('machine_id:m-01,machine_id:m-99'), page: 1, pageSize: 20 })).unknownMachineId,
    ).toBe(true);
    const bothKnown = await store.list({ filter: filter('machine_id:m-01,machine_id:m-02'), page: 1, pageSize: 20 });
    expect(bothKnown).toEqual({ total: 0, machines: [], unknownMachineId: false });
    const mismatch = await store.list({ filter: filter('machine_id:m-03,status:available'), page: 1, pageSize: 20 });
    expect(mismatch).toEqual({ total: 0, machines: [], unknownMachineId: false });
    const nothingMatches = await store.list({ filter: filter('gpu_name:tpu'), page: 1, pageSize: 20 });
    expect(nothingMatches.unknownMachineId).toBe(false);

    await store.remove('m-01', 2_000);
    expect((await store.list({ filter: filter('machine_id:m-01'), page: 1, pageSize: 20 })).unknownMachineId).toBe(
      true,
    );
  });

  it('sees its own writes on the next list', async () => {
    expect(await allIds(store, 'status:unavailable')).toEqual(['m-03', 'm-07']);
    await store.upsert(machine('m-01', { status: 'unavailable', memory: 32 }), 2_000);
    await store.upsert(machine('m-00', { status: 'unavailable' }), 2_000);
    await store.remove('m-07', 2_000);
    expect(await allIds(store, 'status:unavailable')).toEqual(['m-00', 'm-01', 'm-03']);
    expect(await allIds(store, 'memory_size:32')).toEqual(['m-01', 'm-02', 'm-03']);
  });

  it('rejects a page or page size below 1', async () => {
    await expect(store.list({ filter: filter(), page: 0, pageSize: 20 })).rejects.toThrow(RangeError);
    await expect(store.list({ filter: filter(), page: 1, pageSize: 0 })).rejects.toThrow(RangeError);
    await expect(store.list({ filter: filter(), page: 1.5, pageSize: 20 })).rejects.toThrow(RangeError);
  });

  it('shares one reload between concurrent first calls', async () => {
    const connection = otherConnection();
    const fresh = new RedisMachineStore(connection, keys);
    const scans = vi.spyOn(connection, 'hscan');
    const pages = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        fresh.list({ filter: filter(i % 2 ? 'status:available' : ''), page: 1, pageSize: 20 }),
      ),
    );
    expect(pages.map((p) => p.total)).toEqual([7, 5, 7, 5, 7, 5, 7, 5]);
    expect(scans).toHaveBeenCalledTimes(1);
    fresh.close();
  });

  it('loads ahead of the first request with refresh()', async () => {
    const connection = otherConnection();
    const warmed = new RedisMachineStore(connection, keys);
    const scans = vi.spyOn(connection, 'hscan');
    await warmed.refresh();
    expect(scans).toHaveBeenCalledTimes(1);
    expect((await warmed.list({ filter: filter(), page: 1, pageSize: 1 })).total).toBe(7);
    expect(scans).toHaveBeenCalledTimes(1);
    warmed.close();
  });

  it('reloads after close()', async () => {
    expect(await allIds(store)).toHaveLength(7);
    store.close();
    await store.upsert(machine('m-08'), 2_000);
    expect(await allIds(store)).toHaveLength(8);
  });
});

describe('RedisMachineStore across instances', () => {
  let writer: RedisMachineStore;
  let reader: RedisMachineStore;
  let readerRedis: Redis;

  beforeEach(async () => {
    writer = store;
    readerRedis = otherConnection();
    reader = new RedisMachineStore(readerRedis, keys);
    await seed(writer, FLEET);
    expect(await allIds(reader)).toHaveLength(7);
  });

  afterEach(() => reader.close());

  /** What a store that starts from scratch lists: the truth in Redis. */
  async function truth(text = ''): Promise<string[]> {
    const fresh = new RedisMachineStore(t.redis, keys);
    try {
      return await allIds(fresh, text);
    } finally {
      fresh.close();
    }
  }

  it('catches up with creates, updates and removals made through another instance', async () => {
    await writer.upsert(machine('m-08', { memory: 512, gpus: ['NVIDIA H100'] }), 2_000);
    await writer.upsert(machine('m-01', { status: 'unavailable', memory: 32 }), 2_000);
    await writer.remove('m-05', 2_000);
    expect(await allIds(reader)).toEqual(['m-01', 'm-02', 'm-03', 'm-04', 'm-06', 'm-07', 'm-08']);
    expect(await allIds(reader, 'status:unavailable')).toEqual(['m-01', 'm-03', 'm-07']);
    expect(await allIds(reader, 'gpu_name:h100,memory_size:200GB')).toEqual(['m-07', 'm-08']);
    expect(await allIds(reader, 'gpu_name:h100,memory_size:300GB')).toEqual(['m-08']);
    expect((await reader.list({ filter: filter('machine_id:m-05'), page: 1, pageSize: 20 })).unknownMachineId).toBe(
      true,
    );
  });

  it('merges a large batch of changes in one catch-up', async () => {
    const batch = Array.from({ length: 40 }, (_, i) =>
      machine(`n-${String(i).padStart(3, '0')}`, { memory: i, gpus: ['NVIDIA L4'] }),
    );
    await seed(writer, batch, 2_000);
    for (let i = 0; i < 40; i += 2) await writer.remove(`n-${String(i).padStart(3, '0')}`, 3_000);
    await writer.remove('m-02', 3_000);
    await writer.upsert(machine('a-first', { memory: 1 }), 3_000);
    await writer.upsert(
      machine('m-03', { status: 'available', memory: 128, cores: 32, storage: 2000, cpu: 'AMD EPYC 9654' }),
      3_000,
    );

    const odd = Array.from({ length: 20 }, (_, i) => `n-${String(i * 2 + 1).padStart(3, '0')}`);
    expect(await allIds(reader)).toEqual(['a-first', 'm-01', 'm-03', 'm-04', 'm-05', 'm-06', 'm-07', ...odd]);
    expect(await allIds(reader, 'gpu_name:l4,memory_size:30')).toEqual(['n-031', 'n-033', 'n-035', 'n-037', 'n-039']);
    expect(await allIds(reader, 'status:available,cpu_name:epyc')).toEqual(['m-03']);
    expect(await allIds(reader)).toEqual(await truth());
  });

  it('catches up over more change entries than one round trip reads', async () => {
    const many = Array.from({ length: 1_200 }, (_, i) => machine(`x-${String(i).padStart(4, '0')}`, { memory: 8 }));
    await Promise.all(many.map((m) => writer.upsert(m, 2_000)));
    // Six fleet machines (m-…) state at least 8 GB and sort before the x-… ones.
    const page = await reader.list({ filter: filter('memory_size:8'), page: 13, pageSize: 100 });
    expect(page.total).toBe(1_206);
    expect(ids(page.machines)).toEqual(['x-1194', 'x-1195', 'x-1196', 'x-1197', 'x-1198', 'x-1199']);
  });

  it('catches up over change entries that name thousands of machines, as ingest batches write them', async () => {
    // Ingest applies a request's machine events at once: entries of 250 machines each, 48 of them,
    // 12,000 ids in all (more than Lua can unpack in one call, more than one round trip reads).
    const many = Array.from({ length: 12_000 }, (_, i) => machine(`y-${String(i).padStart(5, '0')}`, { memory: 4 }));
    for (let i = 0; i < many.length; i += 1_000)
      await writer.apply(
        many.slice(i, i + 1_000).map((m) => ({ kind: 'upsert' as const, machine: m, versionMs: 2_000 })),
      );
    expect(await t.redis.xlen(keys.machines.changes)).toBeGreaterThanOrEqual(48);
    const page = await reader.list({ filter: filter('memory_size:4'), page: 1, pageSize: 20 });
    expect(page.total).toBe(12_006);
    expect(await allIds(reader)).toEqual(await truth());
  });

  it('reloads in full when the change stream was deleted, and converges', async () => {
    const scans = vi.spyOn(readerRedis, 'hscan');
    await writer.upsert(machine('lost-1', { memory: 2048 }), 2_000);
    await writer.remove('m-03', 2_000);
    await t.redis.del(keys.machines.changes);
    // Nothing written since the deletion: the reader must still notice what it missed.
    expect(await allIds(reader, 'memory_size:100')).toEqual(['lost-1', 'm-07']);
    expect(scans).toHaveBeenCalledTimes(1);

    await writer.upsert(machine('seen-1'), 3_000);
    expect(await allIds(reader)).toContain('seen-1');
    expect(scans).toHaveBeenCalledTimes(1);
    await writer.upsert(machine('lost-2'), 3_000);
    await t.redis.del(keys.machines.changes);
    await writer.upsert(machine('after-1'), 3_000);
    expect(await allIds(reader)).toEqual(await truth());
    expect(await allIds(reader)).toContain('lost-2');
    expect(scans).toHaveBeenCalledTimes(2);

    // Back on the incremental path: one more write costs no scan.
    await writer.upsert(machine('after-2'), 3_000);
    expect(await allIds(reader)).toContain('after-2');
    expect(scans).toHaveBeenCalledTimes(2);
  });

  it('reloads in full when the change stream was trimmed past its last entry, and converges', async () => {
    await writer.upsert(machine('trimmed-1', { status: 'unavailable' }), 2_000);
    await writer.upsert(machine('m-01', { status: 'unavailable' }), 2_000);
    await t.redis.xtrim(keys.machines.changes, 'MAXLEN', 0);
    await writer.upsert(machine('kept-1', { status: 'unavailable' }), 2_000);
    expect(await allIds(reader, 'status:unavailable')).toEqual(['kept-1', 'm-01', 'm-03', 'm-07', 'trimmed-1']);
    expect(await allIds(reader)).toEqual(await truth());
  });
});
