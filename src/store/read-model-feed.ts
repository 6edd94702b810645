import { agentStatusSchema } from '../domain/agent.js';
import { machineSchema } from '../domain/machine.js';
import type { ReadModelChange } from '../domain/read-model-change.js';
import { taskSchema } from '../domain/task.js';
import type { Redis } from './redis.js';

/**
 * The projection stream: ingest's changes to the read models (machines, agent statuses, tasks) on
 * their way to the projector, which applies them and deletes them. One entry per ingest batch, one
 * field pair per change: the field names the kind (`m` a machine to store, `r` a machine removed,
 * `a` an agent status, `t` a task), the value is `<version ms> <machine, agent status or task JSON>`
 * or, for `r`, `<version ms> <machine id>`. The documents are the validated ones the read models
 * keep (fields the schemas do not name are dropped), never an event's body as sent.
 */

/** The projectors' consumer group. */
export const READ_MODEL_GROUP = 'hookline-read-models';

const MACHINE_UPSERT = 'm';
const MACHINE_REMOVE = 'r';
const AGENT = 'a';
const TASK = 't';

/** Where ingest hands read-model changes over: durable when it resolves. */
export interface ReadModelFeed {
  append(changes: readonly ReadModelChange[]): Promise<void>;
}

/** The fields of one entry holding `changes`, in order. */
export function encodeChanges(changes: readonly ReadModelChange[]): string[] {
  const fields: string[] = [];
  for (const change of changes) {
    const version = String(change.versionMs);
    if (change.model === 'machine') {
      if (change.kind === 'upsert') fields.push(MACHINE_UPSERT, `${version} ${JSON.stringify(change.machine)}`);
      else fields.push(MACHINE_REMOVE, `${version} ${change.machineId}`);
    } else fields.push(change.model === 'agent' ? AGENT : TASK, `${version} ${JSON.stringify(change.doc)}`);
  }
  return fields;
}

/** An entry read back: the changes it holds, and why each field pair that is not one was left out. */
export interface DecodedEntry {
  changes: ReadModelChange[];
  problems: string[];
}

/**
 * Reads an entry's changes; never throws. A field pair that is not a change this version writes
 * (unknown kind, no version, JSON that is not a valid document) is left out with its reason, so one
 * bad entry cannot stop the projection; reasons never quote the content.
 */
export function decodeEntry(fields: readonly Buffer[] | null): DecodedEntry {
  const decoded: DecodedEntry = { changes: [], problems: [] };
  if (fields === null) {
    decoded.problems.push('the entry was deleted before it was projected');
    return decoded;
  }
  if (fields.length === 0) decoded.problems.push('the entry holds no change');
  else if (fields.length % 2 !== 0) decoded.problems.push('the last field has no value');
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const kind = fields[i]!.toString();
    const change = decodeChange(kind, fields[i + 1]!.toString());
    if (typeof change === 'string') decoded.problems.push(`field ${i / 2} (${kind.slice(0, 8)}): ${change}`);
    else decoded.changes.push(change);
  }
  return decoded;
}

/** One field pair as a change, or why it is not one. */
function decodeChange(kind: string, value: string): ReadModelChange | string {
  if (kind !== MACHINE_UPSERT && kind !== MACHINE_REMOVE && kind !== AGENT && kind !== TASK)
    return 'not a kind of change';
  const space = value.indexOf(' ');
  const versionMs = space > 0 ? Number(value.slice(0, space)) : NaN;
  if (!Number.isFinite(versionMs)) return 'no version (event time in ms) before the document';
  const rest = value.slice(space + 1);
  if (kind === MACHINE_REMOVE)
    return rest.length > 0 ? { model: 'machine', kind: 'remove', machineId: rest, versionMs } : 'no machine id';
  let json: unknown;
  try {
    json = JSON.parse(rest);
  } catch {
    return 'the document is not valid JSON';
  }
  if (kind === MACHINE_UPSERT) {
    const parsed = machineSchema.safeParse(json);
    if (!parsed.success) return invalid(parsed.error);
    return { model: 'machine', kind: 'upsert', machine: parsed.data, versionMs };
  }
  if (kind === AGENT) {
    const parsed = agentStatusSchema.safeParse(json);
    return parsed.success ? { model: 'agent', doc: parsed.data, versionMs } : invalid(parsed.error);
  }
  const parsed = taskSchema.safeParse(json);
  return parsed.success ? { model: 'task', doc: parsed.data, versionMs } : invalid(parsed.error);
}

/** Why a document is not valid: where, never what. */
const invalid = (error: { issues: readonly { path: readonly PropertyKey[] }[] }) =>
  `the document is not valid (at ${error.issues[0]?.path.map(String).join('.') || 'its root'})`;

/** Appends each ingest batch's changes to the projection stream as one entry: one XADD. */
export class RedisReadModelFeed implements ReadModelFeed {
  constructor(
    private readonly redis: Redis,
    private readonly stream: string,
  ) {}

  async append(changes: readonly ReadModelChange[]): Promise<void> {
    if (changes.length === 0) return;
    await this.redis.xadd(this.stream, '*', ...encodeChanges(changes));
  }
}

/** How far the projection is behind: entries not yet projected, and how long ago the oldest was appended (0: none). */
export interface ProjectionBacklog {
  entries: number;
  oldestAgeMs: number;
}

/**
 * The projection stream's backlog, read in one round trip (XLEN and the first entry's id, whose
 * time is when Redis appended it). Projected entries are deleted, so what is left is not yet
 * projected, or being projected now.
 */
export async function projectionBacklog(redis: Redis, stream: string, nowMs: number): Promise<ProjectionBacklog> {
  const [entries, first] = await Promise.all([redis.xlen(stream), redis.xrange(stream, '-', '+', 'COUNT', 1)]);
  const firstId = first[0]?.[0];
  const appendedAtMs = firstId === undefined ? undefined : Number(firstId.slice(0, firstId.indexOf('-')));
  return { entries, oldestAgeMs: appendedAtMs === undefined ? 0 : Math.max(0, nowMs - appendedAtMs) };
}
