/**
 * CPU profiles and where their time goes, by the parts of a delivery (PARTS).
 *
 * In the bench, `profileRun` takes a V8 CPU profile of this process's main thread (node:inspector)
 * over one measured run, with the main thread's and the whole process's CPU time, and
 * `costPerDelivery` turns it into CPU µs per delivery of each part (the cost scenario's table).
 *
 * On its own, for a profile `node --cpu-prof` wrote (the whole process's life, start-up included):
 *
 *   node --cpu-prof --cpu-prof-dir=<dir> --import tsx bench/run.ts --only hookline
 *   npx tsx bench/cpu-profile.ts <dir>/<file>.cpuprofile [--top 25] [--focus <regex>]
 *
 * prints the functions with the most self time, self time by package or file, inclusive time of
 * Hookline's functions, and time by part. `--focus` counts only the samples whose stack holds a
 * frame matching the regex (e.g. `recordAttempt`), so the tables show where that function's time goes.
 */
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { procStatCpuUs } from './measure.js';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/**
 * Where a frame's code lives: `src/…`, `bench/…` or `packages/…` (built output as its source:
 * `dist/src/x.js` is `src/x.ts`), `node_modules/<package>/…`, `node:<module>`, or '' for V8's own
 * frames (GC, native functions). A profile taken in another checkout is read by the last `src/`,
 * `bench/` or `packages/` folder in the path.
 */
export function sourceOf(url: string): string {
  if (url === '' || url.startsWith('node:')) return url;
  const file = url.startsWith('file://') ? fileURLToPath(url) : url;
  const modules = file.lastIndexOf('/node_modules/');
  if (modules !== -1) return file.slice(modules + 1);
  const own = file.startsWith(ROOT)
    ? file.slice(ROOT.length)
    : file.slice(Math.max(...['/src/', '/bench/', '/packages/'].map((dir) => file.lastIndexOf(dir))) + 1);
  return own
    .replace(/^dist\//, '')
    .replace(/^(packages\/[^/]+\/)dist\//, '$1')
    .replace(/\.js$/, '.ts');
}

/** The parts a delivery's CPU is told in: issue 23's nine, then the ones that make up "other". */
export const PARTS = [
  { id: 'ingest', label: 'ingest (HTTP, validation, dedupe, read models, matching)' },
  { id: 'admission', label: 'admission (breaker, flow control, send slots, holds)' },
  { id: 'sign', label: 'sign' },
  { id: 'send', label: 'send (undici, SSRF guard)' },
  { id: 'record', label: 'record (delivery log writes)' },
  { id: 'stats', label: 'stats (endpoint stats)' },
  { id: 'metrics', label: 'metrics (prom-client, observers)' },
  { id: 'logs', label: 'logs (pino, the attempt line)' },
  { id: 'queue', label: 'queue (BullMQ and job building; the lean: stream reads)' },
  { id: 'run', label: 'the delivery run (processors, attempt bookkeeping)', other: true },
  { id: 'engine', label: 'engine wiring (src/engine)', other: true },
  { id: 'redis', label: 'Redis client I/O no stack ties to a part', other: true },
  { id: 'gc', label: 'garbage collector', other: true },
  { id: 'runtime', label: 'runtime (event loop, microtasks, V8, Node)', other: true },
  { id: 'bench', label: 'the bench’s producers and counters', other: true },
  { id: 'threads', label: 'other threads (GC helpers, compiler, libuv pool)', other: true },
] as const;

export type PartId = (typeof PARTS)[number]['id'];

interface Frame {
  functionName: string;
  source: string;
}

type Rule = readonly [PartId, (frame: Frame) => boolean];

const sourceIn =
  (pattern: RegExp) =>
  (frame: Frame): boolean =>
    pattern.test(frame.source);

const LEAN_SOURCE = 'bench/lean.ts';

/**
 * The lean pipeline's functions (bench/lean.ts) by part: its code is one file, so its parts are
 * told by function name.
 */
export const LEAN_FUNCTIONS: Readonly<Record<string, PartId>> = {
  handle: 'ingest',
  ingestBatch: 'ingest',
  checkEvent: 'ingest',
  envelopeOf: 'ingest',
  readBatches: 'queue',
  dispatch: 'queue',
  room: 'queue',
  pump: 'queue',
  signatureOf: 'sign',
  deliver: 'send',
  retryLater: 'run',
  recordBatch: 'record',
};

/**
 * Frames that name their part. A sample belongs to the part of the frame nearest the leaf of its
 * stack that one of these matches (tried in order on each frame), so a library's time counts for the
 * code of ours that called it: ioredis under the delivery log's flush is `record`. Frames no rule
 * matches (shared helpers such as src/store/redis.ts, zod, ioredis, Node) pass the sample up.
 */
const DIRECT_RULES: readonly Rule[] = [
  ['logs', (f) => f.source.startsWith('src/') && /^log[A-Z]/.test(f.functionName)],
  ['record', (f) => f.source.startsWith('src/') && /^record[A-Z]/.test(f.functionName)],
  ['admission', (f) => f.source.startsWith('src/') && /^admit/.test(f.functionName)],
  ['metrics', sourceIn(/^src\/metrics\/|^node_modules\/(prom-client|tdigest|bintrees)\//)],
  [
    'logs',
    sourceIn(
      /^src\/logger\.ts$|^node_modules\/(pino|pino-std-serializers|sonic-boom|fast-redact|quick-format-unescaped|thread-stream|atomic-sleep|on-exit-leak-free|safe-stable-stringify)\//,
    ),
  ],
  ['record', sourceIn(/^src\/store\/(delivery-log|attempt-feed)\.ts$/)],
  ['stats', sourceIn(/^src\/(store|delivery)\/[^/]*stats[^/]*\.ts$/)],
  [
    'sign',
    sourceIn(
      /^src\/delivery\/outbound\/(sign|request-headers)\.ts$|^src\/domain\/signing-keys\.ts$|^src\/store\/secret-box\.ts$|^packages\/verify\//,
    ),
  ],
  ['send', sourceIn(/^src\/delivery\/outbound\/http-sender\.ts$|^src\/domain\/ip-policy\.ts$/)],
  [
    'admission',
    sourceIn(
      /^src\/delivery\/endpoints\/|^src\/delivery\/(breaker|endpoint-flow|send-slots|storage-gate|wakeups|batch-holds|pause-holds|operational)\.ts$|^src\/store\/(endpoint-flow|send-rate|circuits|endpoints|held-deliveries)\.ts$|^src\/domain\/(concurrency-limit|rate-limit|endpoint)\.ts$/,
    ),
  ],
  ['queue', sourceIn(/^src\/delivery\/(queue|jobs)\.ts$|^node_modules\/(bullmq|msgpackr|cron-parser)\//)],
  [
    'ingest',
    sourceIn(
      /^src\/ingest\/|^src\/admin\/|^src\/domain\/(event|event-catalogue|events|ids|json-depth|json-text|filter|machine|machine-index|agent|task)\.ts$|^src\/store\/(event-dedupe|read-models|versioned-docs|recent-events|machines|api-keys|rate-limiter)\.ts$|^node_modules\/(fastify|@fastify\/[^/]+|find-my-way|avvio|light-my-request|secure-json-parse|fast-json-stringify|fastify-type-provider-zod|fast-querystring|fast-uri)\//,
    ),
  ],
  ['run', sourceIn(/^src\/(delivery|tasks)\//)],
  ['engine', sourceIn(/^src\/engine(\.ts$|\/)/)],
  ...(Object.entries(LEAN_FUNCTIONS).map(
    ([name, part]) => [part, (f: Frame) => f.source === LEAN_SOURCE && f.functionName === name] as const,
  ) satisfies Rule[]),
  // The lean pipeline's anonymous callbacks pass the sample up like a shared helper; its `post` is a producer's.
  ['bench', (f) => f.source.startsWith('bench/') && (f.source !== LEAN_SOURCE || f.functionName === 'post')],
];

/**
 * For a stack no direct rule matched anywhere (work that runs from the event loop with no caller of
 * ours on the stack), the first of these to match a frame from the leaf decides; else `runtime`.
 * undici's socket reads and writes are sends (the bench producers' few large requests included: a
 * stack cannot tell the two clients apart), ioredis reading replies and flushing auto-pipelined
 * commands serves every part at once, and Node's HTTP server parses the producers' requests.
 */
const FALLBACK_RULES: readonly Rule[] = [
  ['gc', (f) => f.functionName === '(garbage collector)'],
  ['send', sourceIn(/^node_modules\/undici\//)],
  ['redis', sourceIn(/^node_modules\/(ioredis|redis-parser|standard-as-callback|denque|cluster-key-slot)\//)],
  ['ingest', sourceIn(/^node:_http_(server|incoming|outgoing|common)$/)],
];

/** How each part is found, for the bench's output. */
export const ATTRIBUTION_NOTE =
  'A sample belongs to the part of the frame nearest the leaf of its stack that names one (Hookline’s files and entry functions such as logAttempt, ' +
  'recordAttempt and admit; prom-client, pino, BullMQ and fastify; the lean pipeline’s functions), so a library’s time counts for the code that called it; ' +
  'a stack with no such frame (work run from the event loop) goes by library: undici → send, ioredis → Redis client I/O, Node’s HTTP server → ingest, else runtime.';

const IDLE = '(idle)';

/** Main-thread sample time by part (µs) over a profile, and the busy (non-idle) total. */
export function attribute(profile: Profile): { busyUs: number; parts: Map<PartId, number> } {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const frameOf = (id: number): Frame => {
    const { functionName, url } = byId.get(id)!.callFrame;
    return { functionName, source: sourceOf(url) };
  };
  const ruleOn = (leaf: number, rules: readonly Rule[]): PartId | undefined => {
    for (let at: number | undefined = leaf; at !== undefined; at = parent.get(at)) {
      const frame = frameOf(at);
      const rule = rules.find(([, matches]) => matches(frame));
      if (rule) return rule[0];
    }
    return undefined;
  };
  // A node stands for one whole stack, so its part is found once.
  const partOfNode = new Map<number, PartId>();
  const parts = new Map<PartId, number>();
  let busyUs = 0;
  profile.samples.forEach((id, i) => {
    const node = byId.get(id);
    if (!node || node.callFrame.functionName === IDLE) return;
    const deltaUs = profile.timeDeltas[i] ?? 0;
    let part = partOfNode.get(id);
    if (part === undefined) {
      part = ruleOn(id, DIRECT_RULES) ?? ruleOn(id, FALLBACK_RULES) ?? 'runtime';
      partOfNode.set(id, part);
    }
    busyUs += deltaUs;
    parts.set(part, (parts.get(part) ?? 0) + deltaUs);
  });
  return { busyUs, parts };
}

/** A run profiled by `profileRun`. */
export interface ProfiledRun {
  profile: Profile;
  /** CPU time over the profiled window: the whole process (every thread), and its main thread. */
  processUs: number;
  mainThreadUs: number;
}

/**
 * CPU µs per delivery of each part: each part's share of the busy samples times the main thread's
 * CPU time (a busy sample is wall time, which a descheduled thread also spends), plus the other
 * threads' time; then scaled so the parts add up to `totalUs` (the unprofiled run's figure, since
 * sampling costs a little of its own), when given.
 */
export function costPerDelivery(run: ProfiledRun, deliveries: number, totalUs?: number): Record<PartId, number> {
  const { busyUs, parts } = attribute(run.profile);
  const perSampleUs = busyUs > 0 ? run.mainThreadUs / busyUs : 0;
  const cost = Object.fromEntries(
    PARTS.map(({ id }) => [id, ((parts.get(id) ?? 0) * perSampleUs) / deliveries]),
  ) as Record<PartId, number>;
  cost.threads = Math.max(0, run.processUs - run.mainThreadUs) / deliveries;
  const sum = Object.values(cost).reduce((a, b) => a + b, 0);
  if (totalUs === undefined || sum === 0) return cost;
  return Object.fromEntries(PARTS.map(({ id }) => [id, (cost[id] * totalUs) / sum])) as Record<PartId, number>;
}

/**
 * The cost table as markdown rows: each part's µs per delivery for Hookline and the lean pipeline
 * and the difference, "other" and its parts, then the totals beside the naive worker's, and the
 * Redis server's CPU per delivery, which no row above holds.
 */
export function costTableRows(
  hookline: Record<PartId, number>,
  lean: Record<PartId, number>,
  naive: { processUs: number },
  redisUs: { hookline: number; lean: number; naive: number },
): string[] {
  const us = (value: number) => String(Math.round(value));
  const row = (label: string, h: number, l: number, n = '') =>
    `| ${label} | ${us(h)} | ${us(l)} | ${h >= l ? '+' : '−'}${us(Math.abs(h - l))} | ${n} |`;
  const sum = (cost: Record<PartId, number>, parts: readonly { id: PartId }[]) =>
    parts.reduce((total, { id }) => total + cost[id], 0);
  const others = PARTS.filter((part) => 'other' in part);
  return [
    '| CPU µs per delivery | Hookline | lean | Hookline − lean | naive |',
    '|---|---:|---:|---:|---:|',
    ...PARTS.filter((part) => !('other' in part)).map(({ id, label }) => row(label, hookline[id], lean[id])),
    row('other', sum(hookline, others), sum(lean, others)),
    ...others.map(({ id, label }) => row(`other · ${label}`, hookline[id], lean[id])),
    row('**process, total**', sum(hookline, PARTS), sum(lean, PARTS), us(naive.processUs)),
    row('Redis server', redisUs.hookline, redisUs.lean, us(redisUs.naive)),
  ];
}

/** The parts where `a` spends the most more than `b`, largest first: "admission +40, logs +30". */
export function largestDifferences(a: Record<PartId, number>, b: Record<PartId, number>, count: number): string {
  return PARTS.map(({ id }) => ({ id, more: a[id] - b[id] }))
    .sort((x, y) => y.more - x.more)
    .slice(0, count)
    .map(({ id, more }) => `${id} ${more >= 0 ? '+' : '−'}${Math.round(Math.abs(more))}`)
    .join(', ');
}

/** The main thread's CPU time so far, µs (Linux: its /proc task stat). */
const mainThreadCpuUs = () => procStatCpuUs(`/proc/self/task/${process.pid}/stat`);

/** Samples every 250 µs: about 4 % of a busy thread, and enough samples for a part of 1 % in a run of seconds. */
const SAMPLING_INTERVAL_US = 250;

/**
 * BENCH_ALLOCATION_PROFILE=<dir>: each profiled run also samples allocations (every 32 KiB, counting
 * what the collector has freed since) and writes them to <dir> as a .heapprofile (open it in Chrome's
 * DevTools, or sum the self sizes by function), to find where garbage comes from.
 */
const allocationProfileDir = process.env.BENCH_ALLOCATION_PROFILE;
/** BENCH_CPU_PROFILE=<dir>: each profiled run's CPU profile is written to <dir> as a .cpuprofile too. */
const cpuProfileDir = process.env.BENCH_CPU_PROFILE;

async function writeAllocationProfile(session: Session, dir: string): Promise<void> {
  const { profile } = await session.post('HeapProfiler.stopSampling');
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, `run-${Date.now()}.heapprofile`), JSON.stringify(profile));
}

/**
 * Runs `work` with a probe that profiles this process's main thread from `started()` to
 * `finished()` (the measured part of a run), and answers its result with the profile.
 */
export async function profileRun<T>(
  work: (probe: { started(): Promise<void>; finished(): Promise<void> }) => Promise<T>,
): Promise<{ result: T; profiled: ProfiledRun }> {
  const session = new Session();
  session.connect();
  let profiled: ProfiledRun | undefined;
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: SAMPLING_INTERVAL_US });
    let process0 = process.cpuUsage();
    let main0 = 0;
    const result = await work({
      async started() {
        if (allocationProfileDir)
          await session.post('HeapProfiler.startSampling', {
            samplingInterval: 32_768,
            includeObjectsCollectedByMajorGC: true,
            // BENCH_ALLOCATION_SURVIVORS=1: only what outlived the young generation (promoted, or
            // still alive at the end), the allocations that make the old generation's collections.
            includeObjectsCollectedByMinorGC: process.env.BENCH_ALLOCATION_SURVIVORS !== '1',
          } as never);
        await session.post('Profiler.start');
        process0 = process.cpuUsage();
        main0 = mainThreadCpuUs();
      },
      async finished() {
        const used = process.cpuUsage(process0);
        const mainThreadUs = mainThreadCpuUs() - main0;
        const { profile } = await session.post('Profiler.stop');
        if (allocationProfileDir) await writeAllocationProfile(session, allocationProfileDir);
        if (cpuProfileDir) {
          await mkdir(cpuProfileDir, { recursive: true });
          await writeFile(path.join(cpuProfileDir, `run-${Date.now()}.cpuprofile`), JSON.stringify(profile));
        }
        profiled = { profile: profile as Profile, processUs: used.user + used.system, mainThreadUs };
      },
    });
    if (!profiled) throw new Error('the profiled run never reported finished()');
    return { result, profiled };
  } finally {
    session.disconnect();
  }
}

/** node_modules/<pkg>, src/<file>, bench/<file>, node:<module>, or the V8 pseudo-frame. */
function areaOf(url: string, functionName: string): string {
  const source = sourceOf(url);
  if (source === '') return functionName.startsWith('(') ? functionName : '(native)';
  return /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(source)?.[1] ?? source;
}

function label(frame: CallFrame): string {
  const name = frame.functionName || '(anonymous)';
  if (frame.url === '') return name;
  return `${name} ${areaOf(frame.url, name)}:${frame.lineNumber + 1}`;
}

function main(): void {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: tsx bench/cpu-profile.ts <file.cpuprofile> [--top N] [--focus REGEX]');
    process.exitCode = 2;
    return;
  }
  const topAt = process.argv.indexOf('--top');
  const top = topAt === -1 ? 25 : Number(process.argv[topAt + 1] ?? 25);
  const focusAt = process.argv.indexOf('--focus');
  const focus = focusAt === -1 ? undefined : new RegExp(process.argv[focusAt + 1] ?? '');
  const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const stackOf = (id: number) => {
    const stack: CallFrame[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) stack.push(byId.get(at)!.callFrame);
    return stack;
  };

  const self = new Map<string, number>();
  const areas = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const kept: Profile = { nodes: profile.nodes, samples: [], timeDeltas: [] };
  let totalUs = 0;
  let idleUs = 0;
  profile.samples.forEach((id, i) => {
    const deltaUs = profile.timeDeltas[i] ?? 0;
    const node = byId.get(id);
    if (!node) return;
    const stack = stackOf(id);
    if (focus && !stack.some((frame) => focus.test(label(frame)))) return;
    kept.samples.push(id);
    kept.timeDeltas.push(deltaUs);
    totalUs += deltaUs;
    if (node.callFrame.functionName === IDLE) idleUs += deltaUs;
    self.set(label(node.callFrame), (self.get(label(node.callFrame)) ?? 0) + deltaUs);
    const area = areaOf(node.callFrame.url, node.callFrame.functionName);
    areas.set(area, (areas.get(area) ?? 0) + deltaUs);
    // Inclusive: each distinct Hookline function on the stack once.
    const seen = new Set<string>();
    for (const frame of stack) {
      if (!sourceOf(frame.url).startsWith('src/')) continue;
      const key = label(frame);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusive.set(key, (inclusive.get(key) ?? 0) + deltaUs);
    }
  });

  const busyUs = totalUs - idleUs;
  const pct = (us: number) => `${((100 * us) / busyUs).toFixed(1).padStart(5)} %`;
  const msText = (us: number) => `${(us / 1000).toFixed(0).padStart(7)} ms`;
  const print = (title: string, entries: Map<string, number>, count: number) => {
    console.log(`\n${title}`);
    for (const [key, us] of [...entries].sort((a, b) => b[1] - a[1]).slice(0, count))
      console.log(`${msText(us)} ${pct(us)}  ${key}`);
  };
  console.log(
    `${file}${focus ? ` (focus ${focus.source})` : ''}: ${(totalUs / 1e6).toFixed(1)} s sampled, ${(busyUs / 1e6).toFixed(1)} s busy (percentages are of busy time)`,
  );
  self.delete(IDLE);
  areas.delete(IDLE);
  print('Self time by function', self, top);
  print('Self time by package or file', areas, top);
  print('Inclusive time of Hookline functions (src/)', inclusive, top);
  const { parts } = attribute(kept);
  print(
    'Time by part',
    new Map([...parts].map(([id, us]) => [PARTS.find((part) => part.id === id)!.label, us])),
    PARTS.length,
  );
  console.log(`\n${ATTRIBUTION_NOTE}`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) main();
