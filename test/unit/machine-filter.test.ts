import { describe, expect, it } from 'vitest';
import { parseMachineFilter, type MachineFilter } from '../../src/domain/machine-filter.js';

const NONE: MachineFilter = { gpuNames: [], cpuNames: [], machineIds: [], statuses: [] };

function parsed(raw: string | string[] | undefined): MachineFilter {
  const result = parseMachineFilter(raw);
  if (!result.ok) throw new Error(`expected ${JSON.stringify(raw)} to parse, got: ${result.error}`);
  return result.filter;
}

function rejected(raw: string | string[]): string {
  const result = parseMachineFilter(raw);
  if (result.ok)
    throw new Error(`expected ${JSON.stringify(raw)} to be rejected, got ${JSON.stringify(result.filter)}`);
  return result.error;
}

describe('parseMachineFilter: no conditions', () => {
  it.each([
    ['absent', undefined],
    ['empty', ''],
    ['blank', '   '],
    ['no parameters', []],
    ['blank parameters', ['', ' ']],
  ])('%s → an empty filter', (_, raw) => {
    expect(parsed(raw)).toEqual(NONE);
  });
});

describe('parseMachineFilter: each filter name', () => {
  it.each<[string, Partial<MachineFilter>]>([
    ['gpu_name:RTX 4090', { gpuNames: ['rtx 4090'] }],
    ['cpu_name:AMD EPYC', { cpuNames: ['amd epyc'] }],
    ['memory_size:24GB', { memoryMinGb: 24 }],
    ['memory_size:24gb', { memoryMinGb: 24 }],
    ['memory_size:24Gb', { memoryMinGb: 24 }],
    ['memory_size:24', { memoryMinGb: 24 }],
    ['memory_size:24 GB', { memoryMinGb: 24 }],
    ['memory_size:0GB', { memoryMinGb: 0 }],
    ['memory_size:0024GB', { memoryMinGb: 24 }],
    ['memory_size:2147483647GB', { memoryMinGb: 2147483647 }],
    ['storage_size:500GB', { storageMinGb: 500 }],
    ['storage_size:500', { storageMinGb: 500 }],
    ['storage_size:1000 gb', { storageMinGb: 1000 }],
    ['cpu_cores:16', { cpuCoresMin: 16 }],
    ['cpu_cores:0', { cpuCoresMin: 0 }],
    ['machine_id:m-0001', { machineIds: ['m-0001'] }],
    ['machine_id:Host.A:7', { machineIds: ['Host.A:7'] }],
    ['machine_status:available', { statuses: ['available'] }],
    ['status:unavailable', { statuses: ['unavailable'] }],
  ])('%s', (raw, expected) => {
    expect(parsed(raw)).toEqual({ ...NONE, ...expected });
  });

  it('keeps the case of exact-match values', () => {
    expect(parsed('machine_id:AbC,machine_status:Available')).toEqual({
      ...NONE,
      machineIds: ['AbC'],
      statuses: ['Available'],
    });
  });

  it('splits a clause at its first colon only', () => {
    expect(parsed('machine_id:host:42')).toEqual({ ...NONE, machineIds: ['host:42'] });
  });

  it('trims names and values', () => {
    expect(parsed('  gpu_name :  A100  , memory_size: 80GB ')).toEqual({
      ...NONE,
      gpuNames: ['a100'],
      memoryMinGb: 80,
    });
  });
});

describe('parseMachineFilter: combining clauses', () => {
  it('ANDs several clauses of one parameter', () => {
    expect(parsed('gpu_name:Nvidia RTX 3090,memory_size:24GB,cpu_cores:8,status:available')).toEqual({
      ...NONE,
      gpuNames: ['nvidia rtx 3090'],
      memoryMinGb: 24,
      cpuCoresMin: 8,
      statuses: ['available'],
    });
  });

  it('ANDs several filter parameters', () => {
    expect(parsed(['gpu_name:A100', 'storage_size:100GB', 'machine_status:available'])).toEqual({
      ...NONE,
      gpuNames: ['a100'],
      storageMinGb: 100,
      statuses: ['available'],
    });
  });

  it('keeps the largest of repeated minimums', () => {
    expect(
      parsed('memory_size:64GB,memory_size:16GB,cpu_cores:4,cpu_cores:32,storage_size:10,storage_size:20'),
    ).toEqual({
      ...NONE,
      memoryMinGb: 64,
      cpuCoresMin: 32,
      storageMinGb: 20,
    });
  });

  it('keeps every repeated text condition, once each', () => {
    expect(
      parsed(['gpu_name:nvidia,gpu_name:H100', 'gpu_name:NVIDIA', 'status:available,machine_status:unavailable']),
    ).toEqual({
      ...NONE,
      gpuNames: ['nvidia', 'h100'],
      statuses: ['available', 'unavailable'],
    });
  });

  it('accepts 20 clauses', () => {
    const clauses = Array.from({ length: 20 }, (_, i) => `gpu_name:g${i}`);
    expect(parsed(clauses.join(',')).gpuNames).toHaveLength(20);
  });
});

describe('parseMachineFilter: encoded values', () => {
  it('decodes a value that is still percent-encoded (double-encoded clients)', () => {
    expect(parsed('gpu_name:Nvidia%20RTX%203090')).toEqual({ ...NONE, gpuNames: ['nvidia rtx 3090'] });
  });

  it('decodes once only', () => {
    expect(parsed('gpu_name:a%2520b')).toEqual({ ...NONE, gpuNames: ['a%20b'] });
  });

  it('lets an encoded comma and colon stay inside one value', () => {
    expect(parsed('cpu_name:Xeon%2C Gold%3A6338,cpu_cores:8')).toEqual({
      ...NONE,
      cpuNames: ['xeon, gold:6338'],
      cpuCoresMin: 8,
    });
  });

  it('decodes numbers too', () => {
    expect(parsed('memory_size:24%20GB')).toEqual({ ...NONE, memoryMinGb: 24 });
  });

  it('leaves a lone percent sign alone', () => {
    expect(parsed('gpu_name:100%')).toEqual({ ...NONE, gpuNames: ['100%'] });
  });

  it('rejects an invalid percent sequence and names the clause', () => {
    expect(rejected('gpu_name:RTX%203090%E0%A4%A')).toBe(
      'Invalid percent-encoding in filter clause "gpu_name:RTX%203090%E0%A4%A"',
    );
  });

  it('rejects a value that decodes to nothing', () => {
    expect(rejected('gpu_name:%20%20')).toContain('"gpu_name:%20%20" has no value');
  });
});

describe('parseMachineFilter: errors name the offending clause', () => {
  it('unknown filter name', () => {
    expect(rejected('gpu_name:A100,foo:1')).toBe(
      'Unsupported filter "foo" in clause "foo:1"; supported: gpu_name, memory_size, cpu_name, cpu_cores, storage_size, machine_id, machine_status',
    );
  });

  it('filter names are exact', () => {
    expect(rejected('GPU_NAME:A100')).toMatch(/^Unsupported filter "GPU_NAME" in clause "GPU_NAME:A100"/);
  });

  it('missing colon', () => {
    expect(rejected('memory_size:8GB,gpu_name')).toBe(
      'Filter clause "gpu_name" has no ":"; write name:value, e.g. memory_size:24GB',
    );
  });

  it('missing value', () => {
    expect(rejected('gpu_name:')).toBe(
      'Filter clause "gpu_name:" has no value; write name:value, e.g. memory_size:24GB',
    );
    expect(rejected('gpu_name:   ')).toContain('"gpu_name:" has no value');
  });

  it('missing name', () => {
    expect(rejected(':A100')).toBe('Filter clause ":A100" has no name; write name:value, e.g. memory_size:24GB');
  });

  it.each([
    ['a doubled comma', 'gpu_name:A100,,memory_size:8', 2],
    ['a trailing comma', 'gpu_name:A100,', 2],
    ['a leading comma', ',gpu_name:A100', 1],
    ['a blank clause', 'gpu_name:A100, ,cpu_cores:2', 2],
  ])('empty clause: %s', (_, raw, position) => {
    expect(rejected(raw)).toBe(
      `Empty filter clause at position ${position} in "${raw}"; separate name:value clauses with single commas`,
    );
  });

  it.each(['24TB', '-1', '1.5', 'abc', '24 G B', 'GB', '2147483648', '99999999999GB'])(
    'bad memory_size %s',
    (value) => {
      expect(rejected(`memory_size:${value}`)).toBe(
        `Invalid memory_size value in clause "memory_size:${value}": expected a whole number of GB such as 24GB (at most 2147483647)`,
      );
    },
  );

  it.each(['1TB', '-5', 'ten'])('bad storage_size %s', (value) => {
    expect(rejected(`storage_size:${value}`)).toBe(
      `Invalid storage_size value in clause "storage_size:${value}": expected a whole number of GB such as 24GB (at most 2147483647)`,
    );
  });

  it.each(['8GB', '-1', '2.5', 'eight', '2147483648'])('bad cpu_cores %s', (value) => {
    expect(rejected(`cpu_cores:${value}`)).toBe(
      `Invalid cpu_cores value in clause "cpu_cores:${value}": expected a whole number such as 8 (at most 2147483647)`,
    );
  });

  it('too many clauses, counted over all parameters', () => {
    const twelve = Array.from({ length: 12 }, (_, i) => `gpu_name:g${i}`).join(',');
    expect(rejected([twelve, twelve])).toBe('Too many filter clauses (24); at most 20 are allowed');
    expect(rejected(Array.from({ length: 21 }, () => 'cpu_cores:1').join(','))).toBe(
      'Too many filter clauses (21); at most 20 are allowed',
    );
  });

  it('value longer than 256 characters, quoted shortened', () => {
    const value = 'x'.repeat(257);
    const error = rejected(`gpu_name:${value}`);
    expect(error).toBe(`The value of filter clause "gpu_name:${'x'.repeat(71)}…" is longer than 256 characters`);
    expect(parsed(`gpu_name:${'x'.repeat(256)}`).gpuNames[0]).toHaveLength(256);
  });

  it('the first bad clause wins', () => {
    expect(rejected('cpu_cores:x,foo:1')).toContain('"cpu_cores:x"');
  });
});
