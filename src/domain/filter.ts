/**
 * Payload filters: which events a webhook wants, as a small JSON language over the event envelope
 * (docs/receiving-webhooks.md, "Payload filters"). A filter is one node:
 *
 *   { "path": "data.status", "eq": "unavailable" }            equal (strict: no type coercion)
 *   { "path": "data.status", "ne": "available" }              not equal (a missing value is not equal)
 *   { "path": "data.metadata.cuda_version", "in": ["12.4"] }  equal to one of (≤ 100 values)
 *   { "path": "data.network_info.bandwidth", "gt": 1000 }     gt, gte, lt, lte: numbers only; a value
 *                                                              that is not a number never matches
 *   { "path": "data.fail_reason", "exists": true }            present (null counts), or absent with false
 *   { "and": [ … ] }, { "or": [ … ] }, { "not": { … } }       1 to 20 nodes each
 *
 * Paths are dotted: `event_type`, `event_id`, `timestamp`, `version`, or `data` and keys into it
 * (`data.hardware_specs.gpus.0.name`: a whole number steps into an array). Comparison values are JSON scalars
 * (string ≤ 256 characters, finite number, boolean, null).
 *
 * Limits keep every filter cheap to check at ingest: depth ≤ 6, nodes ≤ 50, paths ≤ 8 segments of
 * ≤ 64 characters, 4 KiB of JSON. A filter is checked once when it is stored (`parseFilter`, a
 * clear problem naming the bad part) and compiled to closures (`compileFilter`), never evaluated
 * with eval; a check then costs well under a microsecond per node.
 */

type Scalar = string | number | boolean | null;

export type FilterNode =
  | { path: string; eq: Scalar }
  | { path: string; ne: Scalar }
  | { path: string; in: Scalar[] }
  | { path: string; gt: number }
  | { path: string; gte: number }
  | { path: string; lt: number }
  | { path: string; lte: number }
  | { path: string; exists: boolean }
  | { and: FilterNode[] }
  | { or: FilterNode[] }
  | { not: FilterNode };

export const FILTER_LIMITS = {
  depth: 6,
  nodes: 50,
  branches: 20,
  inValues: 100,
  pathSegments: 8,
  segmentChars: 64,
  stringChars: 256,
  jsonBytes: 4_096,
} as const;

const COMPARISONS = ['eq', 'ne', 'in', 'gt', 'gte', 'lt', 'lte', 'exists'] as const;
type Comparison = (typeof COMPARISONS)[number];
const ROOTS = new Set(['event_type', 'event_id', 'timestamp', 'version', 'data']);
const SEGMENT = /^[A-Za-z0-9_-]+$/;
const SYMBOL: Record<Comparison, string> = {
  eq: '==',
  ne: '!=',
  in: 'in',
  gt: '>',
  gte: '>=',
  lt: '<',
  lte: '<=',
  exists: 'exists',
};

export type FilterParse = { ok: true; filter: FilterNode } | { ok: false; problem: string };

class FilterProblem extends Error {}

/**
 * Checks a filter as a vendor sent it (already JSON-parsed). The problem names the bad part by its
 * place, e.g. `filter.and[1].path: …`, so a vendor can find it in a filter of many nodes.
 */
export function parseFilter(input: unknown): FilterParse {
  let bytes: number;
  try {
    bytes = Buffer.byteLength(JSON.stringify(input) ?? '', 'utf8');
  } catch {
    return { ok: false, problem: 'filter: must be JSON' };
  }
  if (bytes > FILTER_LIMITS.jsonBytes)
    return { ok: false, problem: `filter: must be at most ${FILTER_LIMITS.jsonBytes} bytes of JSON (it is ${bytes})` };
  const counter = { nodes: 0 };
  try {
    return { ok: true, filter: parseNode(input, 'filter', 1, counter) };
  } catch (error) {
    if (error instanceof FilterProblem) return { ok: false, problem: error.message };
    throw error;
  }
}

function parseNode(input: unknown, at: string, depth: number, counter: { nodes: number }): FilterNode {
  if (depth > FILTER_LIMITS.depth)
    throw new FilterProblem(`${at}: nested too deep (at most ${FILTER_LIMITS.depth} levels)`);
  counter.nodes += 1;
  if (counter.nodes > FILTER_LIMITS.nodes)
    throw new FilterProblem(`${at}: too many nodes (at most ${FILTER_LIMITS.nodes} in a filter)`);
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new FilterProblem(
      `${at}: must be an object such as {"path": "data.status", "eq": "unavailable"} or {"and": [...]}`,
    );
  }
  const record = input as Record<string, unknown>;
  const keys = Object.keys(record);
  for (const logical of ['and', 'or'] as const) {
    if (!(logical in record)) continue;
    if (keys.length !== 1)
      throw new FilterProblem(`${at}: "${logical}" stands alone in its object (found ${keys.join(', ')})`);
    const list = record[logical];
    if (!Array.isArray(list) || list.length === 0 || list.length > FILTER_LIMITS.branches) {
      throw new FilterProblem(`${at}.${logical}: must be a list of 1 to ${FILTER_LIMITS.branches} filters`);
    }
    const nodes = list.map((child, i) => parseNode(child, `${at}.${logical}[${i}]`, depth + 1, counter));
    return logical === 'and' ? { and: nodes } : { or: nodes };
  }
  if ('not' in record) {
    if (keys.length !== 1)
      throw new FilterProblem(`${at}: "not" stands alone in its object (found ${keys.join(', ')})`);
    return { not: parseNode(record.not, `${at}.not`, depth + 1, counter) };
  }
  const path = parsePath(record.path, `${at}.path`);
  const ops = keys.filter((k) => k !== 'path');
  const unknown = ops.filter((k) => !(COMPARISONS as readonly string[]).includes(k));
  if (unknown.length > 0)
    throw new FilterProblem(
      `${at}: unknown field ${unknown.map((k) => `"${k}"`).join(', ')} (comparisons: ${COMPARISONS.join(', ')}; or and, or, not)`,
    );
  if (ops.length !== 1)
    throw new FilterProblem(`${at}: needs exactly one comparison beside "path" (${COMPARISONS.join(', ')})`);
  const op = ops[0] as Comparison;
  const value = record[op];
  const where = `${at}.${op}`;
  switch (op) {
    case 'eq':
      return { path, eq: parseScalar(value, where) };
    case 'ne':
      return { path, ne: parseScalar(value, where) };
    case 'in': {
      if (!Array.isArray(value) || value.length === 0 || value.length > FILTER_LIMITS.inValues) {
        throw new FilterProblem(`${where}: must be a list of 1 to ${FILTER_LIMITS.inValues} values`);
      }
      return { path, in: value.map((v, i) => parseScalar(v, `${where}[${i}]`)) };
    }
    case 'exists':
      if (typeof value !== 'boolean') throw new FilterProblem(`${where}: must be true or false`);
      return { path, exists: value };
    default:
      if (typeof value !== 'number' || !Number.isFinite(value)) throw new FilterProblem(`${where}: must be a number`);
      return { path, [op]: value } as FilterNode;
  }
}

function parsePath(input: unknown, at: string): string {
  if (typeof input !== 'string' || input === '')
    throw new FilterProblem(`${at}: must be a dotted path into the event, such as "data.status"`);
  const segments = input.split('.');
  if (!ROOTS.has(segments[0]!))
    throw new FilterProblem(
      `${at}: must start with data, event_type, event_id, timestamp or version (got "${clip(segments[0]!)}")`,
    );
  if (segments.length > FILTER_LIMITS.pathSegments)
    throw new FilterProblem(`${at}: at most ${FILTER_LIMITS.pathSegments} segments`);
  if (segments[0] !== 'data' && segments.length > 1) throw new FilterProblem(`${at}: only data has fields below it`);
  for (const segment of segments) {
    if (segment.length > FILTER_LIMITS.segmentChars || !SEGMENT.test(segment)) {
      throw new FilterProblem(
        `${at}: "${clip(segment)}" is not a key (letters, digits, _ and -, at most ${FILTER_LIMITS.segmentChars})`,
      );
    }
  }
  return input;
}

function parseScalar(input: unknown, at: string): Scalar {
  if (input === null || typeof input === 'boolean') return input;
  if (typeof input === 'number') {
    if (!Number.isFinite(input)) throw new FilterProblem(`${at}: must be a finite number`);
    return input;
  }
  if (typeof input === 'string') {
    if (input.length > FILTER_LIMITS.stringChars)
      throw new FilterProblem(`${at}: strings are at most ${FILTER_LIMITS.stringChars} characters`);
    return input;
  }
  throw new FilterProblem(`${at}: must be a string, number, boolean or null (not a list or object)`);
}

/**
 * Why `input` is not a path as filters name them (`data.metadata.machine_id`: a root, then keys of
 * letters, digits, _ and -), with the problem naming it `at`; undefined when it is one.
 */
export function pathProblem(input: unknown, at: string): string | undefined {
  try {
    parsePath(input, at);
    return undefined;
  } catch (error) {
    if (error instanceof FilterProblem) return error.message;
    throw error;
  }
}

function clip(text: string): string {
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

/** The value a checked path (split at its dots) leads to in an event, or `undefined` when it leads nowhere. */
export function valueAt(event: unknown, segments: readonly string[]): unknown {
  let value: unknown = event;
  for (const segment of segments) {
    if (typeof value !== 'object' || value === null) return undefined;
    if (Array.isArray(value)) {
      if (!/^\d+$/.test(segment)) return undefined;
      value = value[Number(segment)];
    } else {
      if (!Object.hasOwn(value, segment)) return undefined;
      value = (value as Record<string, unknown>)[segment];
    }
  }
  return value;
}

/** A checked filter as a function of the parsed envelope. */
export type CompiledFilter = (event: unknown) => boolean;

/** Compiles a checked filter to closures (once per filter; the closures do no parsing). */
export function compileFilter(node: FilterNode): CompiledFilter {
  if ('and' in node) {
    const children = node.and.map(compileFilter);
    return (event) => children.every((child) => child(event));
  }
  if ('or' in node) {
    const children = node.or.map(compileFilter);
    return (event) => children.some((child) => child(event));
  }
  if ('not' in node) {
    const child = compileFilter(node.not);
    return (event) => !child(event);
  }
  const segments = node.path.split('.');
  const test = comparisonOf(node);
  return (event) => test(valueAt(event, segments));
}

function comparisonOf(
  node: Exclude<FilterNode, { and: unknown } | { or: unknown } | { not: unknown }>,
): (value: unknown) => boolean {
  if ('eq' in node) return (value) => value === node.eq;
  if ('ne' in node) return (value) => value !== node.ne;
  if ('in' in node) {
    const set = new Set<unknown>(node.in);
    return (value) => set.has(value);
  }
  if ('exists' in node) return node.exists ? (value) => value !== undefined : (value) => value === undefined;
  if ('gt' in node) return (value) => typeof value === 'number' && value > node.gt;
  if ('gte' in node) return (value) => typeof value === 'number' && value >= node.gte;
  if ('lt' in node) return (value) => typeof value === 'number' && value < node.lt;
  return (value) => typeof value === 'number' && value <= node.lte;
}

/** Why a filter matched or not, node by node (the filter-test endpoint's answer). */
export interface FilterExplanation {
  matched: boolean;
  /** The node in words, e.g. `data.status == "unavailable"`. */
  test: string;
  /** For a comparison: what its path leads to: a value (in `found`), nothing, an object or a list. */
  foundKind?: 'value' | 'missing' | 'object' | 'list';
  /** The value found, when it is one. */
  found?: Scalar;
  /** For and / or / not: the children, each explained. */
  parts?: FilterExplanation[];
}

/** Evaluates a checked filter against an event, explaining every node (slower than compileFilter; for dry runs). */
export function explainFilter(node: FilterNode, event: unknown): FilterExplanation {
  if ('and' in node || 'or' in node) {
    const isAnd = 'and' in node;
    const parts = (isAnd ? node.and : node.or).map((child) => explainFilter(child, event));
    const matched = isAnd ? parts.every((p) => p.matched) : parts.some((p) => p.matched);
    return { matched, test: isAnd ? `all of ${parts.length}` : `any of ${parts.length}`, parts };
  }
  if ('not' in node) {
    const part = explainFilter(node.not, event);
    return { matched: !part.matched, test: 'not', parts: [part] };
  }
  const value = valueAt(event, node.path.split('.'));
  const op = COMPARISONS.find((c) => c in node)!;
  const operand = (node as Record<string, unknown>)[op];
  return {
    matched: compileFilter(node)(event),
    test: `${node.path} ${SYMBOL[op]} ${JSON.stringify(operand)}`,
    ...shownValue(value),
  };
}

function shownValue(value: unknown): Pick<FilterExplanation, 'foundKind' | 'found'> {
  if (value === undefined) return { foundKind: 'missing' };
  if (Array.isArray(value)) return { foundKind: 'list' };
  if (typeof value === 'object' && value !== null) return { foundKind: 'object' };
  return { foundKind: 'value', found: value as Scalar };
}
