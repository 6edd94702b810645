import type { Machine } from '../domain/machine.js';
import type { MachineFilter } from '../domain/machine-filter.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** Applies machine events to the read model; an older event time never overwrites a newer state. */
export interface MachineWriter {
  /** Stores the whole machine unless a newer version (create, update or removal) is already recorded. */
  upsert(machine: Machine, versionMs: number): Promise<'applied' | 'stale'>;
  /** Removes the machine, keeping its version as a tombstone so older writes cannot bring it back. */
  remove(machineId: string, versionMs: number): Promise<'applied' | 'stale' | 'missing'>;
}

export interface MachineListQuery {
  filter: MachineFilter;
  /** 1-based. */
  page: number;
  pageSize: number;
}

export interface MachinePage {
  /** Machines matching the filter, over all pages. */
  total: number;
  /** The requested page, ordered by machine id; empty past the last page. */
  machines: Machine[];
  /** True when the filter names a machine id that is not a known machine (the listing's 404). */
  unknownMachineId: boolean;
}

/** Answers filtered, paginated machine listings. */
export interface MachineListing {
  list(query: MachineListQuery): Promise<MachinePage>;
}

export interface MachineStoreOptions {
  /** How long a removal is remembered to reject older writes; default 7 days. */
  tombstoneTtlMs?: number;
  /** Clock used to age tombstones; default Date.now. */
  nowMs?: () => number;
}

/** Approximate length the change stream is trimmed to on every write. */
export const MACHINE_CHANGES_MAXLEN = 100_000;
export const MACHINE_TOMBSTONE_TTL_MS = 7 * 24 * 3_600_000;

/** Expired tombstones dropped per removal, so one write never does unbounded work. */
const TOMBSTONES_PRUNED_PER_WRITE = 100;
/** Change-stream entries read per catch-up round trip. */
const CATCH_UP_ENTRIES_MAX = 1_000;
/** HSCAN batch size of a full reload. */
const RELOAD_SCAN_COUNT = 2_000;
/** Up to this many inserts and removals are spliced in place; more are merged in one pass. */
const SPLICE_CHANGES_MAX = 16;
/** Reloads one catch-up may do before giving up (the stream outran every reload). */
const RELOADS_PER_CATCH_UP_MAX = 3;
/** Stored numbers are clamped to the filter's largest accepted value, which keeps every ≥ comparison exact. */
const STORED_NUMBER_MAX = 2 ** 31 - 1;
/** A number the machine does not state; below every filter minimum (minimums are ≥ 0). */
const ABSENT = -1;

// Every script touches only keys of the `{<prefix>:machines}` hash tag: one Redis Cluster slot.

/** KEYS: docs, index, versions, tombstones, changes. ARGV: id, version, Machine JSON, index JSON, stream maxlen. */
const UPSERT_LUA = `
local stored = redis.call('HGET', KEYS[3], ARGV[1])
if stored and tonumber(stored) > tonumber(ARGV[2]) then return 'stale' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[5], '*', 'id', ARGV[1], 'op', 'upsert')
return 'applied'
`;

/**
 * KEYS: docs, index, versions, tombstones, changes.
 * ARGV: id, version, stream maxlen, tombstone horizon (ms; older tombstones are dropped), prune batch.
 */
const REMOVE_LUA = `
local stored = redis.call('HGET', KEYS[3], ARGV[1])
if stored and tonumber(stored) > tonumber(ARGV[2]) then return 'stale' end
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[4], 'LIMIT', 0, tonumber(ARGV[5]))
for _, id in ipairs(expired) do
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
end
local existed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
if existed == 0 then return 'missing' end
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[1], 'op', 'remove')
return 'applied'
`;

/**
 * KEYS: changes, index. ARGV: last seen entry id ('0-0' = none since the reload), max entries, stream maxlen.
 * Returns {'reload'} when entries may have been lost (our last entry was trimmed or the stream
 * deleted), else {'ok', new last id, changed ids, their index records (nil = removed), entry count}.
 */
const CHANGES_LUA = `
local last = ARGV[1]
local entries
if last == '0-0' then
  if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {'reload'} end
  entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[2])
else
  if #redis.call('XRANGE', KEYS[1], last, last) == 0 then return {'reload'} end
  entries = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', ARGV[2])
end
if #entries == 0 then return {'ok', last, {}, {}, 0} end
local ids, seen = {}, {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'id' and not seen[fields[i + 1]] then
      seen[fields[i + 1]] = true
      ids[#ids + 1] = fields[i + 1]
    end
  end
end
local records = {}
if #ids > 0 then records = redis.call('HMGET', KEYS[2], unpack(ids)) end
return {'ok', entries[#entries][1], ids, records, #entries}
`;

type ChangesReply = ['reload'] | ['ok', string, string[], (string | null)[], number];

type ScriptCall = (...args: (string | number)[]) => Promise<unknown>;

function defineScript(redis: Redis, name: string, numberOfKeys: number, lua: string): ScriptCall {
  redis.defineCommand(name, { numberOfKeys, lua });
  const commands = redis as unknown as Record<string, ScriptCall>;
  return (...args) => commands[name]!(...args);
}

/**
 * What the listing needs of one machine; numbers are ABSENT when the machine does not state them.
 * Names stay as stored: the dictionaries lower-case each distinct one once.
 */
interface IndexRecord {
  status: string;
  memoryGb: number;
  cpuCores: number;
  storageGb: number;
  cpuModel: string;
  /** JSON array of the machine's GPU names, the key of its GPU name set. */
  gpuNamesJson: string;
}

/** The compact index record stored beside each document, as JSON (short keys; absent numbers omitted). */
function encodeIndexRecord(machine: Machine): string {
  const specs = machine.hardware_specs;
  return JSON.stringify({
    s: machine.status,
    m: specs?.memory?.total_memory,
    c: specs?.cpu?.cores,
    d: specs?.storage?.disk_space_available,
    cpu: specs?.cpu?.model,
    gpu: (specs?.gpus ?? []).flatMap((gpu) => (gpu.name === undefined ? [] : [gpu.name])),
  });
}

function storedNumber(value: unknown): number {
  return typeof value === 'number' && value >= 0 ? Math.min(Math.floor(value), STORED_NUMBER_MAX) : ABSENT;
}

/** Reads an index record; undefined for anything malformed (such a machine is left out of listings). */
function decodeIndexRecord(json: string): IndexRecord | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = raw as Record<string, unknown>;
  if (typeof r.s !== 'string') return undefined;
  return {
    status: r.s,
    memoryGb: storedNumber(r.m),
    cpuCores: storedNumber(r.c),
    storageGb: storedNumber(r.d),
    cpuModel: typeof r.cpu === 'string' ? r.cpu : '',
    gpuNamesJson: Array.isArray(r.gpu) ? JSON.stringify(r.gpu.filter((name) => typeof name === 'string')) : '[]',
  };
}

/** Assigns small integer codes to distinct values, so a row stores a code and a query tests each value once. */
class Dictionary<T> {
  private readonly codes = new Map<string, number>();
  readonly values: T[] = [];

  constructor(private readonly decode: (key: string) => T) {}

  encode(key: string): number {
    let code = this.codes.get(key);
    if (code === undefined) {
      code = this.values.length;
      this.codes.set(key, code);
      this.values.push(this.decode(key));
    }
    return code;
  }

  lookup(key: string): number | undefined {
    return this.codes.get(key);
  }
}

// One row of ColumnarIndex.rows: STRIDE Int32 cells at these offsets.
const STATUS = 0;
const MEMORY = 1;
const CORES = 2;
const STORAGE = 3;
const CPU = 4;
const GPUS = 5;
const STRIDE = 6;

interface IndexQueryResult {
  total: number;
  pageIds: string[];
  unknownMachineId: boolean;
}

/**
 * The in-memory listing index: machine ids sorted ascending (the listing's order) and, row for row,
 * six Int32 cells: status code, memory, cores, storage, CPU model code, GPU name set code.
 * Dictionaries only grow; a full reload starts them afresh, which bounds them by the distinct names
 * seen since the last reload.
 */
class ColumnarIndex {
  private ids: string[] = [];
  private rows = new Int32Array(0);
  private readonly statuses = new Dictionary<string>((status) => status);
  /** CPU model as stored → lower-cased. */
  private readonly cpuModels = new Dictionary<string>((model) => model.toLowerCase());
  /** JSON array of a machine's GPU names as stored → the lower-cased names. */
  private readonly gpuSets = new Dictionary<string[]>((json) => (JSON.parse(json) as string[]).map((name) => name.toLowerCase()));

  static build(records: ReadonlyMap<string, IndexRecord>): ColumnarIndex {
    const index = new ColumnarIndex();
    // The default sort compares UTF-16 code units, exactly as compareIds does, and is faster.
    const ids = [...records.keys()].sort();
    index.rows = new Int32Array(capacityFor(ids.length) * STRIDE);
    ids.forEach((id, row) => index.encodeRow(index.rows, row, records.get(id)!));
    index.ids = ids;
    return index;
  }

  /** The row of `id`, or `-(insertion point) - 1` when absent. */
  find(id: string): number {
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

  /** Applies changed records (undefined = removed): updates in place, few inserts/removals by splicing, many by one merge. */
  apply(changes: ReadonlyMap<string, IndexRecord | undefined>): void {
    const structural: Array<[string, IndexRecord | undefined]> = [];
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

  private insertAt(row: number, id: string, record: IndexRecord): void {
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
  private merge(changes: ReadonlyArray<[string, IndexRecord | undefined]>): void {
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

  private encodeRow(rows: Int32Array, row: number, record: IndexRecord): void {
    const base = row * STRIDE;
    rows[base + STATUS] = this.statuses.encode(record.status);
    rows[base + MEMORY] = record.memoryGb;
    rows[base + CORES] = record.cpuCores;
    rows[base + STORAGE] = record.storageGb;
    rows[base + CPU] = this.cpuModels.encode(record.cpuModel);
    rows[base + GPUS] = this.gpuSets.encode(record.gpuNamesJson);
  }

  /** Counts the machines matching `filter` and returns the ids of matches number offset … offset+limit-1. */
  query(filter: MachineFilter, offset: number, limit: number): IndexQueryResult {
    const none = (unknownMachineId: boolean): IndexQueryResult => ({ total: 0, pageIds: [], unknownMachineId });
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
        : Uint8Array.from(this.cpuModels.values, (model) => (cpuNeedles.every((needle) => model.includes(needle)) ? 1 : 0));
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
      return { total: to - from, pageIds: this.ids.slice(from + offset, Math.min(from + end, to)), unknownMachineId: false };
    }

    // 4. One pass in id order: count every match, keep the page's ids. Absent numbers (-1) fail any minimum.
    const rows = this.rows;
    const pageIds: string[] = [];
    let total = 0;
    for (let row = from; row < to; row += 1) {
      const base = row * STRIDE;
      if (statusCode !== ABSENT && rows[base + STATUS] !== statusCode) continue;
      if (rows[base + MEMORY]! < memoryMin || rows[base + CORES]! < coresMin || rows[base + STORAGE]! < storageMin) continue;
      if (cpuOk !== undefined && cpuOk[rows[base + CPU]!] === 0) continue;
      if (gpuOk !== undefined && gpuOk[rows[base + GPUS]!] === 0) continue;
      if (total >= offset && total < end) pageIds.push(this.ids[row]!);
      total += 1;
    }
    return { total, pageIds, unknownMachineId: false };
  }
}

function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function capacityFor(rows: number): number {
  return Math.max(1024, 2 ** Math.ceil(Math.log2(Math.max(rows, 1) * 1.25)));
}

function assertVersion(versionMs: number): void {
  if (!Number.isFinite(versionMs)) throw new TypeError(`machine version must be a finite number of ms, got ${versionMs}`);
}

/**
 * The machine read model in Redis (documents, index records, versions, tombstones, change stream)
 * plus a listing served from an in-memory columnar index that each instance keeps in step with the
 * change stream: one round trip per list() to catch up, one HMGET for the page's documents.
 */
export class RedisMachineStore implements MachineWriter, MachineListing {
  private readonly redis: Redis;
  private readonly keys: RedisKeys['machines'];
  private readonly tombstoneTtlMs: number;
  private readonly nowMs: () => number;
  private readonly upsertScript: ScriptCall;
  private readonly removeScript: ScriptCall;
  private readonly changesScript: ScriptCall;

  private index: ColumnarIndex | undefined;
  /** The last change-stream entry the index reflects; '0-0' when the stream was empty at the reload. */
  private lastEntryId = '0-0';
  /** Bumped by close(), so a catch-up that was in flight does not install its result afterwards. */
  private generation = 0;
  private running: Promise<ColumnarIndex> | undefined;
  private queued: Promise<ColumnarIndex> | undefined;

  constructor(redis: Redis, keys: RedisKeys, options: MachineStoreOptions = {}) {
    this.redis = redis;
    this.keys = keys.machines;
    this.tombstoneTtlMs = options.tombstoneTtlMs ?? MACHINE_TOMBSTONE_TTL_MS;
    this.nowMs = options.nowMs ?? Date.now;
    this.upsertScript = defineScript(redis, 'hooklineMachineUpsert', 5, UPSERT_LUA);
    this.removeScript = defineScript(redis, 'hooklineMachineRemove', 5, REMOVE_LUA);
    this.changesScript = defineScript(redis, 'hooklineMachineChanges', 2, CHANGES_LUA);
  }

  private get writeKeys(): string[] {
    const k = this.keys;
    return [k.docs, k.index, k.versions, k.tombstones, k.changes];
  }

  async upsert(machine: Machine, versionMs: number): Promise<'applied' | 'stale'> {
    assertVersion(versionMs);
    const reply = await this.upsertScript(
      ...this.writeKeys,
      machine.metadata.machine_id,
      String(versionMs),
      JSON.stringify(machine),
      encodeIndexRecord(machine),
      MACHINE_CHANGES_MAXLEN,
    );
    if (reply === 'applied' || reply === 'stale') return reply;
    throw new Error(`unexpected reply from the machine upsert script: ${String(reply)}`);
  }

  async remove(machineId: string, versionMs: number): Promise<'applied' | 'stale' | 'missing'> {
    assertVersion(versionMs);
    const reply = await this.removeScript(
      ...this.writeKeys,
      machineId,
      String(versionMs),
      MACHINE_CHANGES_MAXLEN,
      String(this.nowMs() - this.tombstoneTtlMs),
      TOMBSTONES_PRUNED_PER_WRITE,
    );
    if (reply === 'applied' || reply === 'stale' || reply === 'missing') return reply;
    throw new Error(`unexpected reply from the machine remove script: ${String(reply)}`);
  }

  /** The stored machine, or undefined when it is unknown or removed. */
  async get(machineId: string): Promise<Machine | undefined> {
    const doc = await this.redis.hget(this.keys.docs, machineId);
    return doc === null ? undefined : (JSON.parse(doc) as Machine);
  }

  async list(query: MachineListQuery): Promise<MachinePage> {
    const { filter, page, pageSize } = query;
    if (!Number.isSafeInteger(page) || page < 1 || !Number.isSafeInteger(pageSize) || pageSize < 1) {
      throw new RangeError(`page and pageSize must be positive integers, got ${page} and ${pageSize}`);
    }
    // 1. Catch up with the change stream (one round trip), 2. match in memory, 3. fetch the page.
    const index = await this.sync();
    const { total, pageIds, unknownMachineId } = index.query(filter, (page - 1) * pageSize, pageSize);
    if (pageIds.length === 0) return { total, machines: [], unknownMachineId };
    const docs = await this.redis.hmget(this.keys.docs, ...pageIds);
    // A machine removed between the catch-up and the HMGET is left out of this page.
    const machines = docs.flatMap((doc) => (doc === null ? [] : [JSON.parse(doc) as Machine]));
    return { total, machines, unknownMachineId };
  }

  /** Catches the in-memory index up now (a full load on first use), e.g. at start-up so no request pays for the load. */
  async refresh(): Promise<void> {
    await this.sync();
  }

  /** Drops the in-memory index; the next list() reloads it. Connections are the caller's to close. */
  close(): void {
    this.generation += 1;
    this.index = undefined;
    this.lastEntryId = '0-0';
    this.running = undefined;
    this.queued = undefined;
  }

  /**
   * Brings the index up to date. At most one catch-up runs at a time; callers arriving meanwhile
   * share one follow-up catch-up, which starts after the running one and so sees their writes.
   */
  private sync(): Promise<ColumnarIndex> {
    if (!this.running) return this.startCatchUp();
    this.queued ??= this.running
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.startCatchUp();
      });
    return this.queued;
  }

  private startCatchUp(): Promise<ColumnarIndex> {
    const running = this.catchUp(this.generation).finally(() => {
      if (this.running === running) this.running = undefined;
    });
    this.running = running;
    return running;
  }

  private async catchUp(generation: number): Promise<ColumnarIndex> {
    const install = (index: ColumnarIndex, lastEntryId: string) => {
      if (generation !== this.generation) return;
      this.index = index;
      this.lastEntryId = lastEntryId;
    };
    let reloads = 0;
    const reload = async () => {
      reloads += 1;
      if (reloads > RELOADS_PER_CATCH_UP_MAX) throw new Error('machine index: the change stream outran every reload');
      const fresh = await this.reload();
      install(fresh.index, fresh.lastEntryId);
      return fresh;
    };
    let index = this.index;
    let lastEntryId = this.lastEntryId;
    if (!index) ({ index, lastEntryId } = await reload());
    for (;;) {
      const reply = (await this.changesScript(
        this.keys.changes,
        this.keys.index,
        lastEntryId,
        CATCH_UP_ENTRIES_MAX,
        MACHINE_CHANGES_MAXLEN,
      )) as ChangesReply;
      if (reply[0] === 'reload') {
        ({ index, lastEntryId } = await reload());
        continue;
      }
      const [, nextEntryId, ids, records, entryCount] = reply;
      if (ids.length > 0) {
        const changes = new Map<string, IndexRecord | undefined>();
        ids.forEach((id, i) => {
          const record = records[i];
          changes.set(id, record ? decodeIndexRecord(record) : undefined);
        });
        index.apply(changes);
      }
      lastEntryId = nextEntryId;
      install(index, lastEntryId);
      if (entryCount < CATCH_UP_ENTRIES_MAX) return index;
    }
  }

  /** Builds a fresh index from the index hash (HSCAN), noting first where the change stream ends. */
  private async reload(): Promise<{ index: ColumnarIndex; lastEntryId: string }> {
    // Read the stream's tail before scanning: writes racing the scan come after it, so the
    // catch-up that follows re-applies them.
    const tail = await this.redis.xrevrange(this.keys.changes, '+', '-', 'COUNT', 1);
    const lastEntryId = tail[0]?.[0] ?? '0-0';
    const records = new Map<string, IndexRecord>();
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.hscan(this.keys.index, cursor, 'COUNT', RELOAD_SCAN_COUNT);
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const record = decodeIndexRecord(flat[i + 1]!);
        if (record) records.set(flat[i]!, record);
      }
      cursor = next;
    } while (cursor !== '0');
    return { index: ColumnarIndex.build(records), lastEntryId };
  }
}
