import type { Machine } from '../domain/machine.js';
import type { MachineFilter } from '../domain/machine-filter.js';
import { indexRecordOf, MachineIndex, type MachineIndexRecord } from '../domain/machine-index.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/**
 * One machine event for the read model: store the whole machine, or remove it (keeping its version
 * as a tombstone so older writes cannot bring it back). Either applies unless a newer version
 * (create, update or removal) is already recorded.
 */
export type MachineChange =
  { kind: 'upsert'; machine: Machine; versionMs: number } | { kind: 'remove'; machineId: string; versionMs: number };

/** What applying a change did: `missing` is a removal of a machine that was not there (its version is kept all the same). */
export type MachineChangeResult = 'applied' | 'stale' | 'missing';

/** Applies machine events to the read model; an older event time never overwrites a newer state. */
export interface MachineWriter {
  /** Applies the changes in order, in few round trips however many there are; one result each. */
  apply(changes: readonly MachineChange[]): Promise<MachineChangeResult[]>;
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
const MACHINE_CHANGES_MAXLEN = 100_000;
const MACHINE_TOMBSTONE_TTL_MS = 7 * 24 * 3_600_000;

/** Expired tombstones dropped per removal, so one write never does unbounded work. */
const TOMBSTONES_PRUNED_PER_WRITE = 100;
/** Change-stream entries read per catch-up round trip. */
const CATCH_UP_ENTRIES_MAX = 1_000;
/** Machine ids one catch-up round trip reads at most (whole entries: the last one may pass it). */
const CATCH_UP_IDS_MAX = 5_000;
/** HSCAN batch size of a full reload. */
const RELOAD_SCAN_COUNT = 2_000;
/** Reloads one catch-up may do before giving up (the stream outran every reload). */
const RELOADS_PER_CATCH_UP_MAX = 3;

// Every script touches only keys of the `{<prefix>:machines}` hash tag: one Redis Cluster slot.

type WriteKeys = [docs: string, index: string, versions: string, tombstones: string, changes: string];
/** Changes applied by one script call at most: bounds the time Redis spends in one call. */
const CHANGES_PER_CALL_MAX = 250;
type ChangesKeys = [changes: string, index: string];
type ChangesArgv = [lastEntryId: string, entriesMax: number, changesMaxlen: number, idsMax: number];
type ChangesReply = ['reload'] | ['ok', string, string[], (string | null)[], 0 | 1];

/** The compact index record stored beside each document, as JSON (short keys; unstated numbers and CPU model omitted). */
function encodeIndexRecord(machine: Machine): string {
  const record = indexRecordOf(machine);
  return JSON.stringify({
    s: record.status,
    m: record.memoryGb,
    c: record.cpuCores,
    d: record.storageGb,
    cpu: record.cpuModel,
    gpu: record.gpuNames,
  });
}

const stated = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);

/** Reads an index record; undefined for anything malformed (such a machine is left out of listings). */
function decodeIndexRecord(json: string): MachineIndexRecord | undefined {
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
    memoryGb: stated(r.m),
    cpuCores: stated(r.c),
    storageGb: stated(r.d),
    cpuModel: typeof r.cpu === 'string' ? r.cpu : undefined,
    gpuNames: Array.isArray(r.gpu) ? r.gpu.filter((name): name is string => typeof name === 'string') : [],
  };
}

function assertVersion(versionMs: number): void {
  if (!Number.isFinite(versionMs))
    throw new TypeError(`machine version must be a finite number of ms, got ${versionMs}`);
}

/**
 * The machine read model in Redis (documents, index records, versions, tombstones, change stream)
 * plus a listing served from an in-memory `MachineIndex` that each instance keeps in step with the
 * change stream: one round trip per list() to catch up, one HMGET for the page's documents.
 */
export class RedisMachineStore implements MachineWriter, MachineListing {
  private readonly redis: Redis;
  private readonly keys: RedisKeys['machines'];
  private readonly tombstoneTtlMs: number;
  private readonly nowMs: () => number;
  private readonly applyScript: ScriptCall<WriteKeys, (string | number)[], string[]>;
  private readonly changesScript: ScriptCall<ChangesKeys, ChangesArgv, ChangesReply>;

  private index: MachineIndex | undefined;
  /** The last change-stream entry the index reflects; '0-0' when the stream was empty at the reload. */
  private lastEntryId = '0-0';
  /** Bumped by close(), so a catch-up that was in flight does not install its result afterwards. */
  private generation = 0;
  private running: Promise<MachineIndex> | undefined;
  private queued: Promise<MachineIndex> | undefined;

  constructor(redis: Redis, keys: RedisKeys, options: MachineStoreOptions = {}) {
    this.redis = redis;
    this.keys = keys.machines;
    this.tombstoneTtlMs = options.tombstoneTtlMs ?? MACHINE_TOMBSTONE_TTL_MS;
    this.nowMs = options.nowMs ?? Date.now;
    this.applyScript = defineScriptFile(redis, 'machines-apply', 5);
    this.changesScript = defineScriptFile(redis, 'machines-changes', 2);
  }

  private get writeKeys(): WriteKeys {
    const k = this.keys;
    return [k.docs, k.index, k.versions, k.tombstones, k.changes];
  }

  async apply(changes: readonly MachineChange[]): Promise<MachineChangeResult[]> {
    const results: MachineChangeResult[] = [];
    for (let start = 0; start < changes.length; start += CHANGES_PER_CALL_MAX) {
      const argv: (string | number)[] = [
        MACHINE_CHANGES_MAXLEN,
        String(this.nowMs() - this.tombstoneTtlMs),
        TOMBSTONES_PRUNED_PER_WRITE,
      ];
      for (const change of changes.slice(start, start + CHANGES_PER_CALL_MAX)) {
        assertVersion(change.versionMs);
        if (change.kind === 'upsert') {
          const { machine } = change;
          argv.push(
            'u',
            machine.metadata.machine_id,
            String(change.versionMs),
            JSON.stringify(machine),
            encodeIndexRecord(machine),
          );
        } else argv.push('r', change.machineId, String(change.versionMs));
      }
      for (const reply of await this.applyScript(this.writeKeys, ...argv)) {
        if (reply !== 'applied' && reply !== 'stale' && reply !== 'missing')
          throw new Error(`unexpected reply from the machine apply script: ${String(reply)}`);
        results.push(reply);
      }
    }
    return results;
  }

  /** Stores the whole machine unless a newer version is already recorded (one change of `apply`). */
  async upsert(machine: Machine, versionMs: number): Promise<'applied' | 'stale'> {
    const [result] = await this.apply([{ kind: 'upsert', machine, versionMs }]);
    return result === 'missing' ? 'applied' : result!;
  }

  /** Removes the machine unless a newer version is already recorded (one change of `apply`). */
  async remove(machineId: string, versionMs: number): Promise<MachineChangeResult> {
    const [result] = await this.apply([{ kind: 'remove', machineId, versionMs }]);
    return result!;
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
  private sync(): Promise<MachineIndex> {
    if (!this.running) return this.startCatchUp();
    this.queued ??= this.running
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.startCatchUp();
      });
    return this.queued;
  }

  private startCatchUp(): Promise<MachineIndex> {
    const running = this.catchUp(this.generation).finally(() => {
      if (this.running === running) this.running = undefined;
    });
    this.running = running;
    return running;
  }

  private async catchUp(generation: number): Promise<MachineIndex> {
    const install = (index: MachineIndex, lastEntryId: string) => {
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
      const reply = await this.changesScript(
        [this.keys.changes, this.keys.index],
        lastEntryId,
        CATCH_UP_ENTRIES_MAX,
        MACHINE_CHANGES_MAXLEN,
        CATCH_UP_IDS_MAX,
      );
      if (reply[0] === 'reload') {
        ({ index, lastEntryId } = await reload());
        continue;
      }
      const [, nextEntryId, ids, records, more] = reply;
      if (ids.length > 0) {
        const changes = new Map<string, MachineIndexRecord | undefined>();
        ids.forEach((id, i) => {
          const record = records[i];
          changes.set(id, record ? decodeIndexRecord(record) : undefined);
        });
        index.apply(changes);
      }
      lastEntryId = nextEntryId;
      install(index, lastEntryId);
      if (more === 0) return index;
    }
  }

  /** Builds a fresh index from the index hash (HSCAN), noting first where the change stream ends. */
  private async reload(): Promise<{ index: MachineIndex; lastEntryId: string }> {
    // Read the stream's tail before scanning: writes racing the scan come after it, so the
    // catch-up that follows re-applies them.
    const tail = await this.redis.xrevrange(this.keys.changes, '+', '-', 'COUNT', 1);
    const lastEntryId = tail[0]?.[0] ?? '0-0';
    const records = new Map<string, MachineIndexRecord>();
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.hscan(this.keys.index, cursor, 'COUNT', RELOAD_SCAN_COUNT);
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const record = decodeIndexRecord(flat[i + 1]!);
        if (record) records.set(flat[i]!, record);
      }
      cursor = next;
    } while (cursor !== '0');
    return { index: MachineIndex.fromRecords(records), lastEntryId };
  }
}
