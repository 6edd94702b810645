/**
 * What an accepted event does to the read models (machines, agent statuses, tasks), as a value:
 * ingest turns its events into these and appends them to the projection stream; the projector
 * reads them back and applies them. Pure: no I/O.
 *
 * Why a batch of changes may be cut down to the newest change of each entity ("coalesced") before
 * anything is written: every read-model write is versioned by event time, so a change applies only
 * when no newer one is recorded, and an equal version is written again. Applying a list of changes
 * one at a time therefore leaves each entity as its change with the greatest version left it (the
 * last of them when several share it): any other change either was overwritten by that one or was
 * refused as stale. Applying that one change alone leaves the same state, and it applies exactly
 * when any change of the list would have. So coalescing loses nothing, within an ingest batch and
 * again across the entries the projector reads at once.
 */
import type { AgentStatus } from './agent.js';
import type { AcceptedEvent } from './event.js';
import type { Machine } from './machine.js';
import type { Task } from './task.js';

/** One change to one read-model entity; `versionMs` is the event time. */
export type ReadModelChange =
  | { model: 'machine'; kind: 'upsert'; machine: Machine; versionMs: number }
  | { model: 'machine'; kind: 'remove'; machineId: string; versionMs: number }
  | { model: 'agent'; doc: AgentStatus; versionMs: number }
  | { model: 'task'; doc: Task; versionMs: number };

/** The read-model change an accepted event makes (every event type makes exactly one). */
export function readModelChangeOf(event: AcceptedEvent): ReadModelChange {
  const versionMs = event.timestampMs;
  switch (event.event_type) {
    case 'EVENT_TYPE_MACHINE_CREATED':
    case 'EVENT_TYPE_MACHINE_UPDATED':
      return { model: 'machine', kind: 'upsert', machine: event.data, versionMs };
    case 'EVENT_TYPE_MACHINE_REMOVED':
      return { model: 'machine', kind: 'remove', machineId: event.data.metadata.machine_id, versionMs };
    case 'EVENT_TYPE_DEPLOYMENT_CREATED':
    case 'EVENT_TYPE_DEPLOYMENT_UPDATED':
    case 'EVENT_TYPE_DEPLOYMENT_STOPPED':
      return { model: 'agent', doc: event.data, versionMs };
    case 'TASK_UPDATED':
      // The task lookup lower-cases the id it is asked for, so tasks are stored under that form.
      return { model: 'task', doc: { ...event.data, task_id: event.data.task_id.toLowerCase() }, versionMs };
  }
}

/** The entity a change is about, unique across the three read models. */
function entityOf(change: ReadModelChange): string {
  switch (change.model) {
    case 'machine':
      return `m\n${change.kind === 'upsert' ? change.machine.metadata.machine_id : change.machineId}`;
    case 'agent':
      return `a\n${change.doc.deployment_id}`;
    case 'task':
      return `t\n${change.doc.task_id}`;
  }
}

/**
 * Of each entity, the change with the greatest version, the later one in `changes` among equal
 * versions (see the file's comment for why that is all a list of changes does); in the order the
 * kept changes had in `changes`.
 */
export function latestPerEntity(changes: readonly ReadModelChange[]): ReadModelChange[] {
  const newest = new Map<string, number>();
  changes.forEach((change, i) => {
    const entity = entityOf(change);
    const kept = newest.get(entity);
    if (kept === undefined || change.versionMs >= changes[kept]!.versionMs) newest.set(entity, i);
  });
  if (newest.size === changes.length) return [...changes];
  return [...newest.values()].sort((a, b) => a - b).map((i) => changes[i]!);
}
