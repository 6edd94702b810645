/**
 * The machine listing's in-memory index: what the listing needs of every machine, kept sorted by
 * machine id in columns, answering a `MachineFilter` with the number of matches and one page of
 * machine ids. Pure: no I/O. The machine store loads it from Redis and keeps it in step with the
 * change stream; the matching rules are those of docs/api.md ("The machine listing").
 */
import type { Machine } from './machine.js';
import type { MachineFilter } from './machine-filter.js';

/**
 * What the listing needs of one machine, as the machine states it (undefined: not stated). Names
 * keep their case: the index lower-cases each distinct one once.
 */
export interface MachineIndexRecord {
  status: string;
  memoryGb: number | undefined;
  cpuCores: number | undefined;
  storageGb: number | undefined;
  cpuModel: string | undefined;
  /** The names of the machine's GPUs, in order; GPUs without a name are left out. */
  gpuNames: readonly string[];
}

/** One answer of the index. */
export interface MachineIndexAnswer {
  /** Machines matching the filter, over all pages. */
  total: number;
  /** Ids of the matches number `offset` … `offset + limit - 1`, in machine id order; empty past the end. */
  pageIds: string[];
  /** True when the filter names a machine id that is not in the index (the listing's 404). */
  unknownMachineId: boolean;
}

/** Up to this many inserts and removals are spliced in place; more are merged in one pass. */
export const SPLICE_CHANGES_MAX = 16;
/** Stated numbers are clamped to the filter's largest accepted value, which keeps every ≥ comparison exact in an Int32 cell. */
const STORED_NUMBER_MAX = 2 ** 31 - 1;
/** A number the machine does not state; below every filter minimum (minimums are ≥ 0). */
const ABSENT = -1;

/** What the listing needs of `machine`. */
export function indexRecordOf(machine: Machine): MachineIndexRecord {
  const specs = machine.hardware_specs;
  return {
    status: machine.status,
    memoryGb: specs?.memory?.total_memory,
    cpuCores: specs?.cpu?.cores,
    storageGb: specs?.storage?.disk_space_available,
    cpuModel: specs?.cpu?.model,
    gpuNames: (specs?.gpus ?? []).flatMap((gpu) => (gpu.name === undefined ? [] : [gpu.name])),
  };
}

/** A stated number as a cell: whole, clamped, or ABSENT when not stated (or not a count). */
function cell(value: number | undefined): number {
  return value !== undefined && value >= 0 ? Math.min(Math.floor(value), STORED_NUMBER_MAX) : ABSENT;
}

/** Assigns small integer codes to distinct keys, so a row stores a code and a query tests each value once. */
class Dictionary<S, T> {
  private readonly codes = new Map<string, number>();
  readonly values: T[] = [];

  constructor(private readonly decode: (source: S) => T) {}

  /** The code of `key`; a new key gets the next code and `decode(source)` as its value. */
  encode(key: string, source: S): number {
    let code = this.codes.get(key);
    if (code === undefined) {
      code = this.values.length;
      this.codes.set(key, code);
      this.values.push(this.decode(source));
    }
    return code;
  }

  lookup(key: string): number | undefined {
    return this.codes.get(key);
  }
}

// One row of MachineIndex.rows: STRIDE Int32 cells at these offsets.
const STATUS = 0;
const MEMORY = 1;
const CORES = 2;
const STORAGE = 3;
const CPU = 4;
const GPUS = 5;
const STRIDE = 6;

/**
 * Machine ids sorted ascending (the listing's order: UTF-16 code units, which is byte order for
 * machine ids) and, row for row, six Int32 cells: status code, memory, cores, storage, CPU model
 * code, GPU name set code. Dictionaries only grow; a fresh index (a full reload) starts them
 * afresh, which bounds them by the distinct names seen since it was built.
 */
export class MachineIndex {
  private ids: string[] = [];
  private rows = new Int32Array(0);
  private readonly statuses = new Dictionary<string, string>((status) => status);
  /** CPU model as stated → lower-cased. */
  private readonly cpuModels = new Dictionary<string, string>((model) => model.toLowerCase());
  /** A machine's GPU names (keyed by their JSON array) → the lower-cased names. */
  private readonly gpuSets = new Dictionary<readonly string[], string[]>((names) =>
    names.map((name) => name.toLowerCase()),
  );

  private constructor() {}

  /** An index of `records` (machine id → record). */
  static fromRecords(records: ReadonlyMap<string, MachineIndexRecord>): MachineIndex {
    const index = new MachineIndex();
    // The default sort compares UTF-16 code units, exactly as compareIds does, and is faster.
    const ids = [...records.keys()].sort();
    index.rows = new Int32Array(capacityFor(ids.length) * STRIDE);
    ids.forEach((id, row) => index.encodeRow(index.rows, row, records.get(id)!));
    index.ids = ids;
    return index;
  }

  /**
   * Applies one batch of changes: a record creates or replaces that machine, undefined removes it
   * (an id not in the index is ignored). Replacements are written in place; up to
   * SPLICE_CHANGES_MAX inserts and removals are spliced in, more are merged in one pass.
   */
  apply(changes: ReadonlyMap<string, MachineIndexRecord | undefined>): void {
    const structural: Array<[string, MachineIndexRecord | undefined]> = [];
    for (const [id, record] of changes) {
      const row = this.find(id);
      if (row >= 0 && record) this.encodeRow(this.rows, row, record);
      else if (row >= 0 || record) structural.push([id, record]);
    }
    if (structural.length === 0) return;
    if (structural.length <= SPLICE_CHANGES_MAX) {
      for (const [id, record] of structural) {
        const row = this.find(id);
        if (record) this.insertAt(-row - 1, id, record);
        else this.removeAt(row);
      }
      return;
    }
    structural.sort(([a], [b]) => compareIds(a, b));
    this.merge(structural);
  }

  /**
   * Counts the machines matching `filter` and returns the ids of matches number offset …
   * offset+limit-1. Name needles match case-insensitively as substrings (a GPU needle on any one of
   * the machine's GPUs); ids and statuses match exactly; a minimum never matches a number the
   * machine does not state. Needles are non-empty, as `parseMachineFilter` makes them.
   */
  query(filter: MachineFilter, offset: number, limit: number): MachineIndexAnswer {
    const none = (unknownMachineId: boolean): MachineIndexAnswer => ({ total: 0, pageIds: [], unknownMachineId });
    let from = 0;
    let to = this.ids.length;

    // 1. machine_id narrows the scan to one row; two different ids can never both match.
    if (filter.machineIds.length > 0) {
      const found = filter.machineIds.map((id) => this.find(id));
      if (found.some((row) => row < 0)) return none(true);
      if (new Set(found).size > 1) return none(false);
      from = found[0]!;
      to = from + 1;
    }

    // 2. An exact status is one dictionary code, and an unseen one matches nothing.
    let statusCode = ABSENT;
    const statuses = new Set(filter.statuses);
    if (statuses.size > 1) return none(false);
    for (const status of statuses) {
      const code = this.statuses.lookup(status);
      if (code === undefined) return none(false);
      statusCode = code;
    }

    // 3. Name needles are tested once per distinct name; rows are then tested by code.
    const cpuNeedles = filter.cpuNames.map((name) => name.toLowerCase());
    const gpuNeedles = filter.gpuNames.map((name) => name.toLowerCase());
    const cpuOk =
      cpuNeedles.length === 0
        ? undefined
        : Uint8Array.from(this.cpuModels.values, (model) =>
            cpuNeedles.every((needle) => model.includes(needle)) ? 1 : 0,
          );
    const gpuOk =
      gpuNeedles.length === 0
        ? undefined
        : Uint8Array.from(this.gpuSets.values, (names) =>
            gpuNeedles.every((needle) => names.some((name) => name.includes(needle))) ? 1 : 0,
          );
    const memoryMin = filter.memoryMinGb ?? ABSENT;
    const coresMin = filter.cpuCoresMin ?? ABSENT;
    const storageMin = filter.storageMinGb ?? ABSENT;
    const end = offset + limit;

    const unconditional =
      statusCode === ABSENT && !cpuOk && !gpuOk && memoryMin === ABSENT && coresMin === ABSENT && storageMin === ABSENT;
    if (unconditional) {
      return {
        total: to - from,
        pageIds: this.ids.slice(from + offset, Math.min(from + end, to)),
        unknownMachineId: false,
      };
    }

    // 4. One pass in id order: count every match, keep the page's ids. Absent numbers (-1) fail any minimum.
    const rows = this.rows;
    const pageIds: string[] = [];
    let total = 0;
    for (let row = from; row < to; row += 1) {
      const base = row * STRIDE;
      if (statusCode !== ABSENT && rows[base + STATUS] !== statusCode) continue;
      if (rows[base + MEMORY]! < memoryMin || rows[base + CORES]! < coresMin || rows[base + STORAGE]! < storageMin)
        continue;
      if (cpuOk !== undefined && cpuOk[rows[base + CPU]!] === 0) continue;
      if (gpuOk !== undefined && gpuOk[rows[base + GPUS]!] === 0) continue;
      if (total >= offset && total < end) pageIds.push(this.ids[row]!);
      total += 1;
    }
    return { total, pageIds, unknownMachineId: false };
  }

  /** The row of `id`, or `-(insertion point) - 1` when absent. */
  private find(id: string): number {
    let low = 0;
    let high = this.ids.length - 1;
    while (low <= high) {
      const mid = (low + high) >>> 1;
      const midId = this.ids[mid]!;
      if (midId < id) low = mid + 1;
      else if (midId > id) high = mid - 1;
      else return mid;
    }
    return -low - 1;
  }

  private insertAt(row: number, id: string, record: MachineIndexRecord): void {
    const size = this.ids.length;
    if ((size + 1) * STRIDE > this.rows.length) {
      const grown = new Int32Array(capacityFor(size + 1) * STRIDE);
      grown.set(this.rows.subarray(0, size * STRIDE));
      this.rows = grown;
    }
    this.rows.copyWithin((row + 1) * STRIDE, row * STRIDE, size * STRIDE);
    this.ids.splice(row, 0, id);
    this.encodeRow(this.rows, row, record);
  }

  private removeAt(row: number): void {
    this.rows.copyWithin(row * STRIDE, (row + 1) * STRIDE, this.ids.length * STRIDE);
    this.ids.splice(row, 1);
  }

  /** Rebuilds rows and ids in one pass from the current ones and `changes` (sorted, all inserts or removals). */
  private merge(changes: ReadonlyArray<[string, MachineIndexRecord | undefined]>): void {
    const inserted = changes.filter(([, record]) => record !== undefined).length;
    const nextRows = new Int32Array(capacityFor(this.ids.length + inserted) * STRIDE);
    const nextIds: string[] = [];
    let row = 0;
    const copyUntil = (end: number) => {
      nextRows.set(this.rows.subarray(row * STRIDE, end * STRIDE), nextIds.length * STRIDE);
      for (let r = row; r < end; r += 1) nextIds.push(this.ids[r]!);
      row = end;
    };
    for (const [id, record] of changes) {
      const found = this.find(id);
      copyUntil(found >= 0 ? found : -found - 1);
      if (found >= 0) row += 1;
      if (record) {
        this.encodeRow(nextRows, nextIds.length, record);
        nextIds.push(id);
      }
    }
    copyUntil(this.ids.length);
    this.rows = nextRows;
    this.ids = nextIds;
  }

  private encodeRow(rows: Int32Array, row: number, record: MachineIndexRecord): void {
    const base = row * STRIDE;
    rows[base + STATUS] = this.statuses.encode(record.status, record.status);
    rows[base + MEMORY] = cell(record.memoryGb);
    rows[base + CORES] = cell(record.cpuCores);
    rows[base + STORAGE] = cell(record.storageGb);
    const cpuModel = record.cpuModel ?? '';
    rows[base + CPU] = this.cpuModels.encode(cpuModel, cpuModel);
    rows[base + GPUS] = this.gpuSets.encode(JSON.stringify(record.gpuNames), record.gpuNames);
  }
}

function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function capacityFor(rows: number): number {
  return Math.max(1024, 2 ** Math.ceil(Math.log2(Math.max(rows, 1) * 1.25)));
}
