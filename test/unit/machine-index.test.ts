import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Machine } from '../../src/domain/machine.js';
import type { MachineFilter } from '../../src/domain/machine-filter.js';
import {
  indexRecordOf,
  MachineIndex,
  SPLICE_CHANGES_MAX,
  type MachineIndexAnswer,
  type MachineIndexRecord,
} from '../../src/domain/machine-index.js';

/** The long variant (HOOKLINE_LONG_TESTS=1) runs ten times the cases. */
const LONG = process.env.HOOKLINE_LONG_TESTS === '1';
const runs = (short: number) => (LONG ? short * 10 : short);
/** Each property takes about a second here (ten in the long variant); the rest is room for a busy machine. */
const TIMEOUT_MS = LONG ? 180_000 : 30_000;

// ---------------------------------------------------------------------------------------------
// The reference: the machine listing's filter semantics (docs/api.md) written out plainly over an array of machines.
// ---------------------------------------------------------------------------------------------

const contains = (name: string | undefined, needle: string) =>
  name !== undefined && name.toLowerCase().includes(needle.toLowerCase());
const atLeast = (value: number | undefined, min: number | undefined) =>
  min === undefined || (value !== undefined && value >= min);
/** "Ordering: by machine_id, ascending (byte order)". */
const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

function matches(machine: Machine, filter: MachineFilter): boolean {
  const specs = machine.hardware_specs;
  const gpus = specs?.gpus ?? [];
  return (
    filter.gpuNames.every((needle) => gpus.some((gpu) => contains(gpu.name, needle))) &&
    filter.cpuNames.every((needle) => contains(specs?.cpu?.model, needle)) &&
    atLeast(specs?.memory?.total_memory, filter.memoryMinGb) &&
    atLeast(specs?.cpu?.cores, filter.cpuCoresMin) &&
    atLeast(specs?.storage?.disk_space_available, filter.storageMinGb) &&
    filter.machineIds.every((id) => id === machine.metadata.machine_id) &&
    filter.statuses.every((status) => status === machine.status)
  );
}

function reference(
  machines: ReadonlyMap<string, Machine>,
  filter: MachineFilter,
  offset: number,
  limit: number,
): MachineIndexAnswer {
  const ids = [...machines.values()]
    .filter((machine) => matches(machine, filter))
    .map((machine) => machine.metadata.machine_id)
    .sort(byteOrder);
  return {
    total: ids.length,
    pageIds: ids.slice(offset, offset + limit),
    unknownMachineId: filter.machineIds.some((id) => !machines.has(id)),
  };
}

// ---------------------------------------------------------------------------------------------
// Generators. Names come from small pools so substring needles hit several machines; ids use the
// characters machine ids may hold, in lengths that make prefixes and mixed classes sort together.
// ---------------------------------------------------------------------------------------------

const GPU_NAMES = [
  'NVIDIA GeForce RTX 4090',
  'NVIDIA GeForce RTX 3090',
  'NVIDIA H100',
  'nvidia a100 40gb',
  'NVIDIA A100 80GB PCIe',
  'AMD Instinct MI300X',
  'Tesla T4',
];
const CPU_MODELS = [
  'Intel Xeon Gold 6338',
  'INTEL CORE i9-13900K',
  'AMD EPYC 7763',
  'AMD Ryzen 9 7950X',
  'Apple M2 Ultra',
];
/** Both named statuses and odd ones: another case, another word, a trailing space, a non-ASCII one. */
const STATUSES = ['available', 'unavailable', 'Available', 'retired', 'available ', 'ßtatus'];
/** Needles no pool name contains. */
const MISSING_NEEDLES = ['tpu', 'rtx 5090', 'xeon  gold'];

const idArb = fc
  .tuple(
    fc.constantFrom('0', '1', '9', 'A', 'Z', 'a', 'm', 'z'),
    fc.string({ unit: fc.constantFrom('-', '.', '0', '9', ':', '@', 'A', '_', 'a', 'z'), maxLength: 3 }),
  )
  .map(([first, rest]) => first + rest);

/** Absent, zero, small, at and past the Int32 cells' limit, and the largest safe integer. */
const countArb = fc.oneof(
  fc.integer({ min: 0, max: 70 }),
  fc.constantFrom(0, 2 ** 31 - 2, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER),
);

/** A machine without its id: every part of the hardware may be missing; GPU lists may be empty, mixed or hold unnamed GPUs. */
type Shape = Omit<Machine, 'metadata'>;
const shapeArb: fc.Arbitrary<Shape> = fc.record(
  {
    status: fc.constantFrom(...STATUSES),
    hardware_specs: fc.record(
      {
        cpu: fc.record({ model: fc.constantFrom(...CPU_MODELS), cores: countArb }, { requiredKeys: [] }),
        memory: fc.record({ total_memory: countArb }, { requiredKeys: [] }),
        storage: fc.record({ disk_space_available: countArb }, { requiredKeys: [] }),
        gpus: fc.array(
          fc.record({ name: fc.constantFrom(...GPU_NAMES), memory: fc.constant(24) }, { requiredKeys: ['memory'] }),
          { maxLength: 4 },
        ),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: ['status'] },
);

const machineOf = (id: string, shape: Shape): Machine => ({ ...shape, metadata: { machine_id: id } });

/** An id chosen when the case runs: one the index holds now (by position), or any generated one. */
type IdPick = { present: number } | { any: string };
const idPickArb: fc.Arbitrary<IdPick> = fc.oneof(
  fc.record({ present: fc.nat({ max: 200 }) }),
  fc.record({ any: idArb }),
);

function resolve(pick: IdPick, machines: ReadonlyMap<string, Machine>): string {
  if ('any' in pick) return pick.any;
  const ids = [...machines.keys()];
  return ids.length === 0 ? 'm-none' : ids[pick.present % ids.length]!;
}

/** A piece of a pool name (at least one character), in any case: what a vendor might type. */
const pieceArb = (pool: readonly string[]) =>
  fc
    .tuple(fc.constantFrom(...pool), fc.nat(), fc.nat(), fc.constantFrom('lower', 'upper', 'as is'))
    .map(([name, a, b, casing]) => {
      const start = a % name.length;
      const piece = name.slice(start, start + 1 + (b % (name.length - start)));
      return casing === 'lower' ? piece.toLowerCase() : casing === 'upper' ? piece.toUpperCase() : piece;
    });

/** A needle: mostly a piece of a pool name, sometimes one that matches nothing. */
const needleArb = (pool: readonly string[]) =>
  fc.oneof({ weight: 5, arbitrary: pieceArb(pool) }, { weight: 1, arbitrary: fc.constantFrom(...MISSING_NEEDLES) });

/** Mostly no condition of a kind, so queries with none, one and several conditions all come up. */
const sometimes = <T>(arb: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: arb });
const someOf = <T>(arb: fc.Arbitrary<T>) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constant<T[]>([]) },
    { weight: 1, arbitrary: fc.array(arb, { minLength: 1, maxLength: 2 }) },
  );
const minimumArb = fc.oneof(fc.integer({ min: 0, max: 70 }), fc.constantFrom(0, 2 ** 31 - 2, 2 ** 31 - 1));

interface QuerySpec {
  gpuNames: string[];
  cpuNames: string[];
  memoryMinGb: number | undefined;
  cpuCoresMin: number | undefined;
  storageMinGb: number | undefined;
  machineIds: IdPick[];
  statuses: string[];
  page: number;
  pageSize: number;
}

const querySpecArb: fc.Arbitrary<QuerySpec> = fc.record({
  gpuNames: someOf(needleArb(GPU_NAMES)),
  cpuNames: someOf(needleArb(CPU_MODELS)),
  memoryMinGb: sometimes(minimumArb),
  cpuCoresMin: sometimes(minimumArb),
  storageMinGb: sometimes(minimumArb),
  machineIds: someOf(idPickArb),
  statuses: someOf(fc.constantFrom(...STATUSES, 'never-seen')),
  // Mostly pages with machines on them; some far past the end.
  page: fc.oneof(
    { weight: 4, arbitrary: fc.constant(1) },
    { weight: 3, arbitrary: fc.integer({ min: 2, max: 4 }) },
    { weight: 1, arbitrary: fc.integer({ min: 5, max: 40 }) },
  ),
  pageSize: fc.oneof(fc.integer({ min: 1, max: 6 }), fc.constantFrom(20, 100)),
});

/** One query of the index, checked against the reference over the same machines. */
function expectAgreement(index: MachineIndex, machines: ReadonlyMap<string, Machine>, spec: QuerySpec): void {
  const filter: MachineFilter = {
    gpuNames: spec.gpuNames,
    cpuNames: spec.cpuNames,
    memoryMinGb: spec.memoryMinGb,
    cpuCoresMin: spec.cpuCoresMin,
    storageMinGb: spec.storageMinGb,
    machineIds: spec.machineIds.map((pick) => resolve(pick, machines)),
    statuses: spec.statuses,
  };
  const offset = (spec.page - 1) * spec.pageSize;
  expect(index.query(filter, offset, spec.pageSize), JSON.stringify({ filter, offset, limit: spec.pageSize })).toEqual(
    reference(machines, filter, offset, spec.pageSize),
  );
}

/** From none to enough for several pages; one array (not a choice of sizes) so a failure shrinks to the fewest machines. */
const fleetArb = fc.array(fc.tuple(idArb, shapeArb), { maxLength: 120, size: 'medium' });

function load(fleet: ReadonlyArray<[string, Shape]>): { index: MachineIndex; machines: Map<string, Machine> } {
  const machines = new Map(fleet.map(([id, shape]) => [id, machineOf(id, shape)]));
  const records = new Map(
    [...machines].map(([id, machine]): [string, MachineIndexRecord] => [id, indexRecordOf(machine)]),
  );
  return { index: MachineIndex.fromRecords(records), machines };
}

// ---------------------------------------------------------------------------------------------
// Updates: one batch is what one catch-up applies (each id once, its latest state).
// ---------------------------------------------------------------------------------------------

type Change = { upsert: IdPick; shape: Shape } | { remove: IdPick };
const changeArb: fc.Arbitrary<Change> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ upsert: idPickArb, shape: shapeArb }) },
  { weight: 2, arbitrary: fc.record({ remove: idPickArb }) },
);

/** Batches small enough to be spliced in place and large enough to be merged (one array, so a failure shrinks to the fewest changes). */
const batchArb = fc.array(changeArb, { minLength: 1, maxLength: 80, size: 'medium' });

const stepArb = fc.record({ batch: batchArb, queries: fc.array(querySpecArb, { minLength: 1, maxLength: 4 }) });

describe('MachineIndex against a naive reference (property-based)', () => {
  it(
    'answers any filter and page over a loaded fleet as the reference does',
    () => {
      fc.assert(
        fc.property(fleetArb, fc.array(querySpecArb, { minLength: 1, maxLength: 8 }), (fleet, queries) => {
          const { index, machines } = load(fleet);
          for (const spec of queries) expectAgreement(index, machines, spec);
        }),
        { numRuns: runs(1000) },
      );
    },
    TIMEOUT_MS,
  );

  it(
    'stays in step with the reference over random update sequences, checked after every batch',
    () => {
      // Batches that inserted or removed at most, and more than, SPLICE_CHANGES_MAX machines: both paths must come up.
      const structuralBatches = { spliced: 0, merged: 0 };
      fc.assert(
        fc.property(fleetArb, fc.array(stepArb, { minLength: 1, maxLength: 6 }), (fleet, steps) => {
          const { index, machines } = load(fleet);
          for (const { batch, queries } of steps) {
            // Later changes to the same id replace earlier ones, as a catch-up reads only the latest record.
            const changes = new Map<string, Machine | undefined>();
            for (const change of batch) {
              if ('upsert' in change) {
                const id = resolve(change.upsert, machines);
                changes.set(id, machineOf(id, change.shape));
              } else {
                changes.set(resolve(change.remove, machines), undefined);
              }
            }
            const structural = [...changes].filter(
              ([id, machine]) => (machine === undefined) === machines.has(id),
            ).length;
            if (structural > SPLICE_CHANGES_MAX) structuralBatches.merged += 1;
            else if (structural > 0) structuralBatches.spliced += 1;

            index.apply(new Map([...changes].map(([id, machine]) => [id, machine && indexRecordOf(machine)])));
            for (const [id, machine] of changes) {
              if (machine) machines.set(id, machine);
              else machines.delete(id);
            }
            for (const spec of queries) expectAgreement(index, machines, spec);
          }
        }),
        { numRuns: runs(400) },
      );
      console.log(
        `machine index: ${structuralBatches.spliced} spliced and ${structuralBatches.merged} merged batches checked`,
      );
      expect(structuralBatches.spliced).toBeGreaterThan(0);
      expect(structuralBatches.merged).toBeGreaterThan(0);
    },
    TIMEOUT_MS,
  );
});
