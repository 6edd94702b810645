import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Machine } from '../../src/domain/machine.js';
import { testApp, type TestApp } from '../helpers/app.js';

function machine(
  id: string,
  spec: { status?: string; gpus?: string[]; cpu?: string; cores?: number; memory?: number; disk?: number },
): Machine {
  return {
    status: spec.status ?? 'available',
    metadata: { machine_id: id, geo_location: { country: 'DE', city: 'Berlin' }, cuda_version: '12.4' },
    hardware_specs: {
      cpu: {
        model: spec.cpu ?? 'AMD EPYC 7763 64-Core Processor',
        cpu_arch: 'x86_64',
        cores: spec.cores ?? 16,
        threads: (spec.cores ?? 16) * 2,
        base_clock: 2450,
        boost_clock: 3500,
      },
      memory: { total_memory: spec.memory ?? 64, memory_required: 8 },
      storage: { disk_space_available: spec.disk ?? 500, disk_type: 'nvme', disk_name: 'nvme0n1' },
      gpus: (spec.gpus ?? []).map((name, i) => ({
        id: `${id}-gpu${i}`,
        name,
        memory: 24,
        cuda_cores: 16384,
        tensor_cores: 512,
        flops: 82,
      })),
    },
    network_info: { bandwidth: 1000 },
    machine_prices: [
      { id: `${id}-p1`, amount: '0.45', currency: 'USD' },
      { id: `${id}-p2`, amount: '0.000011', currency: 'BTC' },
    ],
  };
}

const FLEET: Machine[] = [
  machine('m-01', { gpus: ['Nvidia RTX 3090'], memory: 32, cores: 8, disk: 250 }),
  machine('m-02', { gpus: ['NVIDIA GeForce RTX 4090', 'NVIDIA GeForce RTX 4090'], memory: 128, cores: 32, disk: 2000 }),
  machine('m-03', {
    gpus: ['NVIDIA A100 80GB PCIe'],
    memory: 512,
    cores: 64,
    disk: 4000,
    cpu: 'Intel Xeon Platinum 8380',
  }),
  machine('m-04', {
    gpus: ['NVIDIA H100', 'Nvidia RTX 3090'],
    memory: 24,
    cores: 16,
    disk: 1000,
    status: 'unavailable',
  }),
  machine('m-05', { gpus: [], memory: 16, cores: 4, disk: 100, cpu: 'Intel Core i9-13900K' }),
  ...Array.from({ length: 45 }, (_, i) =>
    machine(`m-${String(i + 10).padStart(2, '0')}`, { gpus: ['NVIDIA GeForce RTX 4090'], memory: 64 }),
  ),
];

describe('GET /rental/v1/machines', () => {
  let t: TestApp;
  let key: string;

  beforeAll(async () => {
    t = await testApp();
    key = await t.keyFor(['machines:read']);
    for (const m of FLEET) await t.machines.upsert(m, 1_000);
  });
  afterAll(async () => t.close());

  const list = async (query: string) => {
    const res = await t.app.inject({
      method: 'GET',
      url: `/rental/v1/machines${query}`,
      headers: { 'x-api-key': key },
    });
    return {
      status: res.statusCode,
      body: res.json<{
        total: number;
        current_page: number;
        page_size: number;
        machines: Machine[];
        error?: string;
        code?: string;
      }>(),
    };
  };
  const ids = (machines: Machine[]) => machines.map((m) => m.metadata.machine_id);

  it('answers the first page with defaults (page 1, page_size 20), ordered by machine id, whole resources', async () => {
    const { status, body } = await list('');
    expect(status).toBe(200);
    expect(body.total).toBe(FLEET.length);
    expect(body.current_page).toBe(1);
    expect(body.page_size).toBe(20);
    expect(ids(body.machines)).toEqual(
      FLEET.map((m) => m.metadata.machine_id)
        .sort()
        .slice(0, 20),
    );
    expect(body.machines[0]).toEqual(FLEET[0]);
  });

  it('paginates: every page in order, the last page short, a page past the end empty', async () => {
    const seen: string[] = [];
    for (let page = 1; page <= 3; page += 1) {
      const { body } = await list(`?page=${page}&page_size=20`);
      expect(body.current_page).toBe(page);
      seen.push(...ids(body.machines));
    }
    expect(seen).toEqual(FLEET.map((m) => m.metadata.machine_id).sort());
    const past = await list('?page=4&page_size=20');
    expect(past.status).toBe(200);
    expect(past.body).toEqual({ total: FLEET.length, current_page: 4, page_size: 20, machines: [] });
    expect((await list('?page_size=100')).body.machines).toHaveLength(FLEET.length);
  });

  it.each([
    ['gpu_name:Nvidia%20RTX%203090', ['m-01', 'm-04']],
    ['gpu_name:nvidia+rtx+3090', ['m-01', 'm-04']],
    ['gpu_name:Nvidia%2520RTX%25203090', ['m-01', 'm-04']],
    ['gpu_name:rtx%204090,memory_size:128GB', ['m-02']],
    ['gpu_name:H100', ['m-04']],
    ['gpu_name:a100', ['m-03']],
    ['memory_size:500gb', ['m-03']],
    ['memory_size:24', ['m-01', 'm-02', 'm-03', 'm-04', ...FLEET.slice(5).map((m) => m.metadata.machine_id)]],
    ['cpu_name:xeon', ['m-03']],
    ['cpu_name:INTEL', ['m-03', 'm-05']],
    ['cpu_cores:32', ['m-02', 'm-03']],
    ['storage_size:1000GB', ['m-02', 'm-03', 'm-04']],
    ['machine_id:m-05', ['m-05']],
    ['machine_status:unavailable', ['m-04']],
    ['status:unavailable', ['m-04']],
    ['gpu_name:3090,machine_status:available', ['m-01']],
    ['gpu_name:3090&filter=cpu_cores:16', ['m-04']],
    ['machine_id:m-05,gpu_name:4090', []],
    ['gpu_name:mi300x', []],
  ])('filter=%s', async (filter, expected) => {
    const { status, body } = await list(`?page_size=100&filter=${filter}`);
    expect(status).toBe(200);
    expect(ids(body.machines)).toEqual(expected);
    expect(body.total).toBe(expected.length);
  });

  it('counts total over all pages of a filtered query', async () => {
    const { body } = await list('?filter=gpu_name:4090&page=2&page_size=10');
    expect(body.total).toBe(46);
    expect(ids(body.machines)).toEqual([
      'm-19',
      'm-20',
      'm-21',
      'm-22',
      'm-23',
      'm-24',
      'm-25',
      'm-26',
      'm-27',
      'm-28',
    ]);
  });

  it.each([
    ['?filter=foo:1', 'Unsupported filter "foo" in clause "foo:1"'],
    ['?filter=gpu_name', 'gpu_name'],
    ['?filter=gpu_name:', 'gpu_name:'],
    ['?filter=memory_size:lots', 'memory_size:lots'],
    ['?filter=memory_size:24TB', 'memory_size:24TB'],
    ['?filter=cpu_cores:-1', 'cpu_cores:-1'],
    ['?filter=storage_size:1.5GB', 'storage_size:1.5GB'],
    ['?filter=gpu_name:a,,cpu_cores:2', 'Empty filter clause at position 2'],
    ['?filter=gpu_name:%25E0%25A4%25A', 'gpu_name:%E0%A4%A'],
  ])('answers 400 naming the bad clause for %s', async (query, fragment) => {
    const { status, body } = await list(query);
    expect(status).toBe(400);
    expect(body.code).toBe('invalid_filter');
    expect(body.error).toContain(fragment);
  });

  it.each([
    ['?page=0', 'page must be a whole number from 1'],
    ['?page=-1', 'page must be a whole number from 1'],
    ['?page=abc', 'page must be a whole number from 1'],
    ['?page=1.5', 'page must be a whole number from 1'],
    ['?page_size=0', 'page_size must be a whole number from 1 to 100'],
    ['?page_size=101', 'page_size must be a whole number from 1 to 100'],
    ['?page_size=', 'page_size must be a whole number from 1 to 100'],
    ['?page=1&page=2', 'page must be given once'],
  ])('answers 400 for pagination %s', async (query, message) => {
    const { status, body } = await list(query);
    expect(status).toBe(400);
    expect(body.code).toBe('invalid_request');
    expect(body.error).toContain(message);
  });

  it('answers 404 Machine not found for a machine_id that names no machine', async () => {
    const { status, body } = await list('?filter=machine_id:m-404');
    expect(status).toBe(404);
    expect(body).toEqual({ error: 'Machine not found', code: 'machine_not_found' });
  });

  it('reflects writes at once: an update, a removal and a stale event', async () => {
    await t.machines.upsert(machine('m-05', { gpus: ['NVIDIA H100'], memory: 16, cpu: 'Intel Core i9-13900K' }), 2_000);
    expect(ids((await list('?filter=gpu_name:h100')).body.machines)).toEqual(['m-04', 'm-05']);
    expect(await t.machines.upsert(machine('m-05', { gpus: [] }), 1_500)).toBe('stale');
    expect(ids((await list('?filter=gpu_name:h100')).body.machines)).toEqual(['m-04', 'm-05']);
    expect(await t.machines.remove('m-05', 3_000)).toBe('applied');
    expect((await list('?filter=machine_id:m-05')).status).toBe(404);
    expect((await list('')).body.total).toBe(FLEET.length - 1);
  });
});
