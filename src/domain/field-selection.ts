import { pathProblem, type FilterNode } from './filter.js';

/** What decides a webhook's deliveries at ingest: its payload filter and the fields of data it is sent. */
export interface DeliveryShape {
  filter: FilterNode | undefined;
  includeFields: string[] | undefined;
}

/**
 * A webhook's `include_fields`: the paths of `data` its deliveries carry, the rest left out (smaller
 * requests, and no field a vendor did not ask for). The envelope's own fields (version, event_id,
 * event_type, timestamp) are always sent, and so are the identifiers a receiver needs to act on an
 * event or look it up (IDENTIFIER_PATHS), named or not. Paths are named as payload filters name them
 * (`data.status`, `data.hardware_specs.gpu`); they select object keys, and a list at a named path is
 * sent whole. The body is cut at ingest, once per delivery: the signature covers what is sent.
 */

/** Kept in every body, whatever include_fields says: what an event is about. */
export const IDENTIFIER_PATHS = ['data.machine_id', 'data.deployment_id', 'data.task_id', 'data.metadata.machine_id'];
/** Paths one webhook may name at most. */
export const INCLUDE_FIELDS_MAX = 50;

/** Why `input` is not a path include_fields takes, or undefined when it is one. */
export function includeFieldProblem(input: unknown, at: string): string | undefined {
  const problem = pathProblem(input, at);
  if (problem !== undefined) return problem;
  return (input as string).startsWith('data.')
    ? undefined
    : `${at}: must name a field under data, such as "data.status"`;
}

/** A tree of the keys to keep: a leaf (`true`) keeps the whole value found there. */
type Selection = Map<string, Selection | true>;

/** Compiles include_fields (checked paths, `data.` first) and the identifiers into a function of an event's data. */
export function compileFieldSelection(paths: readonly string[]): (data: unknown) => unknown {
  const root: Selection = new Map();
  for (const path of [...IDENTIFIER_PATHS, ...paths]) {
    const segments = path.split('.').slice(1);
    let node = root;
    for (const [i, segment] of segments.entries()) {
      const existing = node.get(segment);
      if (existing === true) break;
      if (i === segments.length - 1) {
        node.set(segment, true);
        break;
      }
      const next: Selection = existing ?? new Map<string, Selection | true>();
      node.set(segment, next);
      node = next;
    }
  }
  return (data) => select(data, root) ?? {};
}

/** The parts of `value` the selection names, in `value`'s own key order; undefined when none is there. */
function select(value: unknown, selection: Selection): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const out: Record<string, unknown> = {};
  let kept = false;
  for (const [key, field] of Object.entries(value as Record<string, unknown>)) {
    const wanted = selection.get(key);
    if (wanted === undefined) continue;
    const part = wanted === true ? field : select(field, wanted);
    if (part === undefined) continue;
    out[key] = part;
    kept = true;
  }
  return kept ? out : undefined;
}
