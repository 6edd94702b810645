/**
 * Summarises a `.cpuprofile` written by `node --cpu-prof`: the functions with the most self time,
 * self time by package or source file, and inclusive time of Hookline's own functions.
 *
 *   node --cpu-prof --cpu-prof-dir=<dir> --import tsx bench/run.ts --only e2e
 *   npx tsx bench/cpu-profile.ts <dir>/<file>.cpuprofile [--top 25] [--focus <regex>]
 *
 * `--focus` counts only the samples whose stack holds a frame matching the regex (e.g. `recordAttempt`),
 * so the tables show where that function's time goes.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

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

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** node_modules/<pkg>, src/<file>, bench/<file>, node:<module>, or the V8 pseudo-frame. */
function areaOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  const modules = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (modules) return modules[1]!;
  const own = /\/((?:src|bench)\/.+)$/.exec(url.replace(/^file:\/\//, ''));
  if (own) return own[1]!;
  if (url.startsWith('node:')) return url;
  return path.basename(url);
}

/**
 * Stages of Hookline's work, tried in order against every frame of a sample's stack: the first that
 * matches any frame takes the sample (so BullMQ time under the processor counts as the processor's).
 */
const STAGES: [stage: string, test: (frame: CallFrame) => boolean][] = [
  ['processor: HTTP send', (f) => f.url.includes('/src/delivery/http-sender')],
  ['processor: record attempt', (f) => f.functionName === 'recordAttempt'],
  ['processor: sign', (f) => f.functionName === 'buildRequest'],
  ['processor: log line', (f) => f.url.includes('node_modules/pino')],
  ['processor: rest', (f) => f.url.includes('/src/delivery/processor')],
  ['ingest: HTTP route, validate, project, match, addBulk', (f) => /\/src\/(ingest|admin)\/|node_modules\/(fastify|secure-json-parse)\//.test(f.url)],
  ['bench harness', (f) => f.url.includes('/bench/')],
  ['module loading', (f) => /node_modules\/tsx\/|modules\/cjs\/loader|modules\/esm\//.test(f.url)],
  ['BullMQ job lifecycle (fetch, complete, locks)', (f) => f.url.includes('node_modules/bullmq/')],
  ['undici outside the processor (socket reads, responses)', (f) => f.url.includes('undici')],
  ['ioredis outside the above (replies, writes)', (f) => /node_modules\/(ioredis|redis-parser)\//.test(f.url)],
  ['garbage collector', (f) => f.functionName === '(garbage collector)'],
];

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

  const self = new Map<string, number>();
  const areas = new Map<string, number>();
  const inclusive = new Map<string, number>();
  const stages = new Map<string, number>();
  let totalUs = 0;
  let idleUs = 0;
  profile.samples.forEach((id, i) => {
    const deltaUs = profile.timeDeltas[i] ?? 0;
    const node = byId.get(id);
    if (!node) return;
    if (focus) {
      let inFocus = false;
      for (let at: number | undefined = id; at !== undefined && !inFocus; at = parent.get(at)) inFocus = focus.test(label(byId.get(at)!.callFrame));
      if (!inFocus) return;
    }
    totalUs += deltaUs;
    if (node.callFrame.functionName === '(idle)') idleUs += deltaUs;
    self.set(label(node.callFrame), (self.get(label(node.callFrame)) ?? 0) + deltaUs);
    const area = areaOf(node.callFrame.url, node.callFrame.functionName);
    areas.set(area, (areas.get(area) ?? 0) + deltaUs);
    const stack: CallFrame[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) stack.push(byId.get(at)!.callFrame);
    if (node.callFrame.functionName !== '(idle)') {
      const stage = STAGES.find(([, test]) => stack.some(test))?.[0] ?? 'other';
      stages.set(stage, (stages.get(stage) ?? 0) + deltaUs);
    }
    // Inclusive: each distinct Hookline function on the stack once.
    const seen = new Set<string>();
    for (const frame of stack) {
      if (!/\/src\//.test(frame.url)) continue;
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
    for (const [key, us] of [...entries].sort((a, b) => b[1] - a[1]).slice(0, count)) console.log(`${msText(us)} ${pct(us)}  ${key}`);
  };
  console.log(
    `${file}${focus ? ` (focus ${focus.source})` : ''}: ${(totalUs / 1e6).toFixed(1)} s sampled, ${(busyUs / 1e6).toFixed(1)} s busy (percentages are of busy time)`,
  );
  self.delete('(idle)');
  areas.delete('(idle)');
  print('Self time by function', self, top);
  print('Self time by package or file', areas, top);
  print('Inclusive time of Hookline functions (src/)', inclusive, top);
  print('Time by stage', stages, STAGES.length + 1);
}

main();
