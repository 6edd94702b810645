/**
 * The machine listing's `filter` query parameter: `name:value` clauses separated by commas, all of
 * which a machine must satisfy. The grammar and the matching rule of each name are documented in
 * docs/api.md ("The machine listing"); this module only parses; the machine index (machine-index.ts) does the matching.
 */

/** The conditions of one listing query; empty lists and absent minimums mean "no condition". */
export interface MachineFilter {
  /** Lower-case needles; each must be a substring of the name of at least one of the machine's GPUs. */
  gpuNames: string[];
  /** Lower-case needles; each must be a substring of `hardware_specs.cpu.model`. */
  cpuNames: string[];
  /** `hardware_specs.memory.total_memory` ≥ this many GB. */
  memoryMinGb?: number;
  /** `hardware_specs.cpu.cores` ≥ this. */
  cpuCoresMin?: number;
  /** `hardware_specs.storage.disk_space_available` ≥ this many GB. */
  storageMinGb?: number;
  /** Each must equal `metadata.machine_id` exactly. */
  machineIds: string[];
  /** Each must equal `status` exactly. */
  statuses: string[];
}

export type FilterParse = { ok: true; filter: MachineFilter } | { ok: false; error: string };

/** The filter names, in the order the interface lists them (and error messages repeat them). */
const MACHINE_FILTER_NAMES = [
  'gpu_name',
  'memory_size',
  'cpu_name',
  'cpu_cores',
  'storage_size',
  'machine_id',
  'machine_status',
] as const;

type MachineFilterName = (typeof MACHINE_FILTER_NAMES)[number];

/** Other spellings accepted for a filter name. */
const ALIASES: Readonly<Record<string, MachineFilterName>> = { status: 'machine_status' };

/** Most clauses one query may carry, over all of its `filter` parameters. */
const MACHINE_FILTER_CLAUSES_MAX = 20;
/** Longest clause value, in characters, after decoding. */
const MACHINE_FILTER_VALUE_LENGTH_MAX = 256;
/** Largest number a numeric filter accepts (the largest signed 32-bit integer). */
const MACHINE_FILTER_NUMBER_MAX = 2 ** 31 - 1;

const SIZE_RE = /^(\d+)\s*(?:gb)?$/i;
const WHOLE_RE = /^(\d+)$/;
const PERCENT_SEQUENCE_RE = /%[0-9A-Fa-f]{2}/;
/** Clauses longer than this are shortened when an error message quotes them. */
const QUOTED_CLAUSE_LENGTH_MAX = 80;

/** An empty filter: every machine matches. */
function emptyMachineFilter(): MachineFilter {
  return { gpuNames: [], cpuNames: [], machineIds: [], statuses: [] };
}

/**
 * Parses the (already URL-decoded) `filter` parameter; several parameters are AND-ed together.
 * Absent, empty or blank input means no conditions. Never throws: a bad clause yields an error
 * sentence that quotes it, for a 400 answer.
 */
export function parseMachineFilter(raw: string | string[] | undefined): FilterParse {
  const params = raw === undefined ? [] : Array.isArray(raw) ? raw : [raw];
  const filter = emptyMachineFilter();
  let clauseCount = 0;
  for (const param of params) {
    if (param.trim() === '') continue;
    const clauses = param.split(',');
    clauseCount += clauses.length;
    if (clauseCount > MACHINE_FILTER_CLAUSES_MAX) {
      return fail(`Too many filter clauses (${clauseCount}); at most ${MACHINE_FILTER_CLAUSES_MAX} are allowed`);
    }
    for (const [index, untrimmed] of clauses.entries()) {
      const error = applyClause(filter, untrimmed.trim(), index + 1, param);
      if (error !== undefined) return fail(error);
    }
  }
  return { ok: true, filter };
}

function fail(error: string): FilterParse {
  return { ok: false, error };
}

function quote(clause: string): string {
  const shown = clause.length > QUOTED_CLAUSE_LENGTH_MAX ? `${clause.slice(0, QUOTED_CLAUSE_LENGTH_MAX)}…` : clause;
  return `"${shown}"`;
}

/** Adds one clause's condition to `filter`; returns an error sentence when the clause is bad. */
function applyClause(filter: MachineFilter, clause: string, position: number, param: string): string | undefined {
  if (clause === '') {
    return `Empty filter clause at position ${position} in ${quote(param)}; separate name:value clauses with single commas`;
  }
  const colon = clause.indexOf(':');
  if (colon < 0) return `Filter clause ${quote(clause)} has no ":"; write name:value, e.g. memory_size:24GB`;
  const givenName = clause.slice(0, colon).trim();
  let value = clause.slice(colon + 1).trim();
  if (givenName === '') return `Filter clause ${quote(clause)} has no name; write name:value, e.g. memory_size:24GB`;
  if (value === '') return `Filter clause ${quote(clause)} has no value; write name:value, e.g. memory_size:24GB`;

  // Clients that encode the value themselves and then let their HTTP library encode the query
  // again arrive here still encoded once; one more decoding pass serves them.
  if (PERCENT_SEQUENCE_RE.test(value)) {
    try {
      value = decodeURIComponent(value).trim();
    } catch {
      return `Invalid percent-encoding in filter clause ${quote(clause)}`;
    }
    if (value === '') return `Filter clause ${quote(clause)} has no value; write name:value, e.g. memory_size:24GB`;
  }
  if (value.length > MACHINE_FILTER_VALUE_LENGTH_MAX) {
    return `The value of filter clause ${quote(clause)} is longer than ${MACHINE_FILTER_VALUE_LENGTH_MAX} characters`;
  }

  const name = (MACHINE_FILTER_NAMES as readonly string[]).includes(givenName)
    ? (givenName as MachineFilterName)
    : ALIASES[givenName];
  switch (name) {
    case 'gpu_name':
      addOnce(filter.gpuNames, value.toLowerCase());
      return undefined;
    case 'cpu_name':
      addOnce(filter.cpuNames, value.toLowerCase());
      return undefined;
    case 'machine_id':
      addOnce(filter.machineIds, value);
      return undefined;
    case 'machine_status':
      addOnce(filter.statuses, value);
      return undefined;
    case 'memory_size':
    case 'storage_size': {
      const gb = wholeNumber(SIZE_RE, value);
      if (gb === undefined) {
        return `Invalid ${name} value in clause ${quote(clause)}: expected a whole number of GB such as 24GB (at most ${MACHINE_FILTER_NUMBER_MAX})`;
      }
      // Repeated minimums AND together, so the largest one decides.
      if (name === 'memory_size') filter.memoryMinGb = Math.max(filter.memoryMinGb ?? 0, gb);
      else filter.storageMinGb = Math.max(filter.storageMinGb ?? 0, gb);
      return undefined;
    }
    case 'cpu_cores': {
      const cores = wholeNumber(WHOLE_RE, value);
      if (cores === undefined) {
        return `Invalid cpu_cores value in clause ${quote(clause)}: expected a whole number such as 8 (at most ${MACHINE_FILTER_NUMBER_MAX})`;
      }
      filter.cpuCoresMin = Math.max(filter.cpuCoresMin ?? 0, cores);
      return undefined;
    }
    case undefined:
      return `Unsupported filter "${givenName}" in clause ${quote(clause)}; supported: ${MACHINE_FILTER_NAMES.join(', ')}`;
  }
}

/** The number in `value`'s first capture group when `pattern` matches and it is in range. */
function wholeNumber(pattern: RegExp, value: string): number | undefined {
  const digits = pattern.exec(value)?.[1]?.replace(/^0+(?=\d)/, '');
  if (digits === undefined || digits.length > 10) return undefined;
  const number = Number(digits);
  return number <= MACHINE_FILTER_NUMBER_MAX ? number : undefined;
}

function addOnce(values: string[], value: string): void {
  if (!values.includes(value)) values.push(value);
}
