import type { Machine } from '../domain/machine.js';
import type { MachineFilter } from '../domain/machine-filter.js';
import { indexRecordOf, MachineIndex, type MachineIndexRecord } from '../domain/machine-index.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

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

/**
 * KEYS: docs, index, versions, tombstones, changes. ARGV: stream maxlen, tombstone horizon (ms; older
 * tombstones are dropped, a bounded batch per call), prune batch, then the changes in order:
 * `u`, id, version, Machine JSON, index JSON for an upsert; `r`, id, version for a removal. Returns
 * 'applied', 'stale' or 'missing' per change. The machines it changed go to the change stream as
 * one entry (an `id` field per machine), which listing processes read to update their index.
 *
 * Why it works on the batch rather than per change: this slot is one master's, and every machine
 * event of every producer lands on it. The script 1. reads what it needs once (the versions, and
 * whether each removed machine exists), 2. decides every change in order against that state as the
 * earlier changes of the batch left it, exactly as applying them one at a time would, 3. drops a
 * batch of expired tombstones, and 4. writes each machine's final state with one command per key
 * and kind of write. So a call costs at most 13 commands inside the script however many changes it
 * holds, not about five per change.
 * Every list it unpacks has at most two entries per change (CHANGES_PER_CALL_MAX keeps that far
 * below Lua's unpack limit of 8,000) or the prune batch.
 */
const APPLY_LUA = `
local ops, ids, versions, docs, records = {}, {}, {}, {}, {}
local batchIds, removedIds, listed = {}, {}, {}
local n, a = 0, 4
while a <= #ARGV do
  n = n + 1
  local op, id = ARGV[a], ARGV[a + 1]
  ops[n], ids[n], versions[n] = op, id, ARGV[a + 2]
  if not listed[id] then
    listed[id] = true
    batchIds[#batchIds + 1] = id
  end
  if op == 'u' then
    docs[n], records[n] = ARGV[a + 3], ARGV[a + 4]
    a = a + 5
  else
    removedIds[#removedIds + 1] = id
    a = a + 3
  end
end

-- 1. The stored versions; whether each machine a removal names exists (its index record is the smaller field).
local version, exists = {}, {}
local stored = redis.call('HMGET', KEYS[3], unpack(batchIds))
for i, id in ipairs(batchIds) do
  if stored[i] then version[id] = tonumber(stored[i]) end
end
if #removedIds > 0 then
  local present = redis.call('HMGET', KEYS[2], unpack(removedIds))
  for i, id in ipairs(removedIds) do exists[id] = present[i] ~= false end
end

-- 2. Each change in order; the last one applied to a machine decides its final state.
local out, final, changed, named = {}, {}, {}, {}
local removing = false
for i = 1, n do
  local id, v = ids[i], tonumber(versions[i])
  if version[id] and version[id] > v then
    out[i] = 'stale'
  else
    version[id] = v
    final[id] = i
    local was = exists[id]
    exists[id] = ops[i] == 'u'
    if ops[i] == 'r' then removing = true end
    if ops[i] == 'r' and not was then
      out[i] = 'missing'
    else
      out[i] = 'applied'
      if not named[id] then
        named[id] = true
        changed[#changed + 1] = id
      end
    end
  end
end

-- 3. Removals add tombstones, so they also drop a bounded batch of expired ones. Before the
-- writes below, which put back any of these machines the batch itself changed.
if removing then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
  if #expired > 0 then
    redis.call('HDEL', KEYS[3], unpack(expired))
    redis.call('ZREM', KEYS[4], unpack(expired))
  end
end

-- 4. Each changed machine's final state, one command per key and kind of write.
local docPairs, recordPairs, upserted, removed, tombstones, versionPairs = {}, {}, {}, {}, {}, {}
for _, id in ipairs(batchIds) do
  local i = final[id]
  if i then
    versionPairs[#versionPairs + 1] = id
    versionPairs[#versionPairs + 1] = versions[i]
    if ops[i] == 'u' then
      docPairs[#docPairs + 1] = id
      docPairs[#docPairs + 1] = docs[i]
      recordPairs[#recordPairs + 1] = id
      recordPairs[#recordPairs + 1] = records[i]
      upserted[#upserted + 1] = id
    else
      removed[#removed + 1] = id
      tombstones[#tombstones + 1] = versions[i]
      tombstones[#tombstones + 1] = id
    end
  end
end
if #upserted > 0 then
  redis.call('HSET', KEYS[1], unpack(docPairs))
  redis.call('HSET', KEYS[2], unpack(recordPairs))
  redis.call('ZREM', KEYS[4], unpack(upserted))
end
if #removed > 0 then
  redis.call('HDEL', KEYS[1], unpack(removed))
  redis.call('HDEL', KEYS[2], unpack(removed))
  redis.call('ZADD', KEYS[4], unpack(tombstones))
end
if #versionPairs > 0 then redis.call('HSET', KEYS[3], unpack(versionPairs)) end
if #changed > 0 then
  local fields = {}
  for _, id in ipairs(changed) do
    fields[#fields + 1] = 'id'
    fields[#fields + 1] = id
  end
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
end
return out
`;

/**
 * KEYS: changes, index. ARGV: last seen entry id ('0-0' = none since the reload), max entries, stream
 * maxlen, max machine ids. Returns {'reload'} when entries may have been lost (our last entry was
 * trimmed or the stream deleted), else {'ok', new last id, changed ids, their index records (nil =
 * removed), 1 when more entries may follow (else 0)}. An entry names every machine one batch of
 * changes touched; entries are taken whole until the ids reach the max, and the records are read
 * in chunks (Lua's unpack is bounded), so one catch-up stays bounded however large the batches were.
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
local more = #entries >= tonumber(ARGV[2]) and 1 or 0
local idsMax = tonumber(ARGV[4])
local ids, seen = {}, {}
local taken = 0
for _, entry in ipairs(entries) do
  if taken > 0 and #ids >= idsMax then
    more = 1
    break
  end
  taken = taken + 1
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'id' and not seen[fields[i + 1]] then
      seen[fields[i + 1]] = true
      ids[#ids + 1] = fields[i + 1]
    end
  end
end
local records = {}
for start = 1, #ids, 1000 do
  local chunk = {}
  for i = start, math.min(#ids, start + 999) do chunk[#chunk + 1] = ids[i] end
  local got = redis.call('HMGET', KEYS[2], unpack(chunk))
  for i = 1, #chunk do records[start + i - 1] = got[i] end
end
return {'ok', entries[taken][1], ids, records, more}
`;

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
    this.applyScript = defineScript(redis, { name: 'hooklineMachineApply', keys: 5, lua: APPLY_LUA });
    this.changesScript = defineScript(redis, { name: 'hooklineMachineChanges', keys: 2, lua: CHANGES_LUA });
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
