import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MACHINE_STATUSES, machineSchema } from '../../src/domain/machine.js';

const FULL = {
  status: 'available',
  metadata: {
    machine_id: 'm-0001',
    geo_location: { country: 'Germany', city: 'Frankfurt' },
    cuda_version: '12.4',
  },
  hardware_specs: {
    cpu: { model: 'AMD EPYC 7763', cpu_arch: 'x86_64', cores: 64, threads: 128, base_clock: 2450, boost_clock: 3500 },
    memory: { total_memory: 512, memory_required: 16 },
    storage: { disk_space_available: 2000, disk_type: 'NVMe', disk_name: 'nvme0n1' },
    gpus: [
      { id: 'gpu-0', name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
      { id: 'gpu-1', name: 'NVIDIA A100 80GB PCIe', memory: 80, cuda_cores: 6912, tensor_cores: 432, flops: 312 },
    ],
  },
  network_info: { bandwidth: 10000 },
  machine_prices: [
    { id: 'p-1', amount: '2.45', currency: 'USD' },
    { id: 'p-2', amount: '0.00004', currency: 'BTC' },
  ],
};

function issuePaths(input: unknown): string[] {
  const result = machineSchema.safeParse(input);
  return result.success ? [] : result.error.issues.map((issue) => issue.path.join('.'));
}

describe('machineSchema', () => {
  it('accepts the full resource unchanged', () => {
    expect(machineSchema.parse(FULL)).toEqual(FULL);
  });

  it('needs only status and metadata.machine_id', () => {
    expect(machineSchema.parse({ status: 'unavailable', metadata: { machine_id: 'm-2' } })).toEqual({
      status: 'unavailable',
      metadata: { machine_id: 'm-2' },
    });
  });

  it('accepts any non-empty status, naming the two the interface lists', () => {
    expect(MACHINE_STATUSES).toEqual(['available', 'unavailable']);
    expect(machineSchema.parse({ ...FULL, status: 'maintenance' }).status).toBe('maintenance');
  });

  it('drops fields the interface does not list', () => {
    const parsed = machineSchema.parse({ ...FULL, owner_secret: 'x' });
    expect(parsed).not.toHaveProperty('owner_secret');
  });

  it.each<[string, unknown, string]>([
    ['missing status', { metadata: { machine_id: 'm' } }, 'status'],
    ['empty status', { status: '', metadata: { machine_id: 'm' } }, 'status'],
    ['missing machine id', { status: 'available', metadata: {} }, 'metadata.machine_id'],
    ['machine id with a space', { status: 'available', metadata: { machine_id: 'm 1' } }, 'metadata.machine_id'],
    ['negative cores', { ...FULL, hardware_specs: { cpu: { cores: -1 } } }, 'hardware_specs.cpu.cores'],
    [
      'fractional memory',
      { ...FULL, hardware_specs: { memory: { total_memory: 1.5 } } },
      'hardware_specs.memory.total_memory',
    ],
    [
      'numeric text memory',
      { ...FULL, hardware_specs: { memory: { total_memory: '64' } } },
      'hardware_specs.memory.total_memory',
    ],
    ['empty GPU name', { ...FULL, hardware_specs: { gpus: [{ name: '' }] } }, 'hardware_specs.gpus.0.name'],
    [
      'too long CPU model',
      { ...FULL, hardware_specs: { cpu: { model: 'x'.repeat(257) } } },
      'hardware_specs.cpu.model',
    ],
    ['numeric amount', { ...FULL, machine_prices: [{ amount: 2.45 }] }, 'machine_prices.0.amount'],
    ['amount that is not a number', { ...FULL, machine_prices: [{ amount: 'cheap' }] }, 'machine_prices.0.amount'],
    ['negative amount', { ...FULL, machine_prices: [{ amount: '-1' }] }, 'machine_prices.0.amount'],
  ])('rejects %s', (_, input, path) => {
    expect(issuePaths(input)).toEqual([path]);
  });

  it('bounds the GPU and price lists at 64 entries', () => {
    const gpus = Array.from({ length: 65 }, (_, i) => ({ id: `g${i}` }));
    const prices = Array.from({ length: 65 }, () => ({ amount: '1' }));
    expect(issuePaths({ ...FULL, hardware_specs: { gpus } })).toEqual(['hardware_specs.gpus']);
    expect(issuePaths({ ...FULL, machine_prices: prices })).toEqual(['machine_prices']);
    expect(issuePaths({ ...FULL, hardware_specs: { gpus: gpus.slice(0, 64) } })).toEqual([]);
  });

  it('describes its fields for the OpenAPI document', () => {
    const document = z.toJSONSchema(machineSchema) as unknown as {
      $ref: string;
      $defs: Record<
        string,
        { description?: string; properties: { metadata: { properties: { machine_id: { description?: string } } } } }
      >;
    };
    // Registered as the named component "Machine", so the OpenAPI document references it.
    expect(document.$ref).toBe('#/$defs/Machine');
    const schema = document.$defs.Machine!;
    expect(schema.description).toMatch(/compute machine/);
    expect(schema.properties.metadata.properties.machine_id.description).toBe('Unique identifier of the machine.');
  });
});
