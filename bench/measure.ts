import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * Wall-clock milliseconds with sub-millisecond resolution, comparable across the bench's processes
 * (each derives it from its own time origin and the same system clock).
 */
export function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Clock ticks per second of /proc stat times (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/**
 * CPU time (user + system) in microseconds from a Linux /proc stat file: `/proc/<pid>/stat` for a
 * process, `/proc/<pid>/task/<tid>/stat` for one of its threads. Ten-millisecond resolution.
 */
export function procStatCpuUs(statPath: string): number {
  // Fields after the command name's closing parenthesis start at field 3; utime and stime are 14 and 15.
  const stat = readFileSync(statPath, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) / USER_HZ) * 1e6;
}

export const megabytes = (bytes: number) => bytes / (1024 * 1024);

/** a ÷ b, or 0 when b is 0. */
export const ratio = (a: number, b: number) => (b > 0 ? a / b : 0);

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The value at `share` (0-1) of an ascending list, nearest rank; 0 for an empty list. */
export function percentile(sorted: readonly number[], share: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(share * sorted.length) - 1));
  return sorted[rank]!;
}

/** Least-squares slope of y over x (units of y per unit of x); 0 with fewer than two points. */
export function slope(points: readonly { x: number; y: number }[]): number {
  if (points.length < 2) return 0;
  const meanX = points.reduce((s, p) => s + p.x, 0) / points.length;
  const meanY = points.reduce((s, p) => s + p.y, 0) / points.length;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - meanX) * (p.y - meanY);
    den += (p.x - meanX) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/**
 * Calls `check` every `everyMs` until it returns something other than undefined, or throws after
 * `timeoutMs` naming `what`.
 */
export async function waitUntil<T>(
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  what: string,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Samples the process's memory every `everyMs` until stopped. */
export function sampleProcessMemory(everyMs: number): { stop(): { rssBytes: number[]; heapUsedBytes: number[] } } {
  const rssBytes: number[] = [];
  const heapUsedBytes: number[] = [];
  const take = () => {
    const usage = process.memoryUsage();
    rssBytes.push(usage.rss);
    heapUsedBytes.push(usage.heapUsed);
  };
  take();
  const timer = setInterval(take, everyMs);
  return {
    stop() {
      clearInterval(timer);
      take();
      return { rssBytes, heapUsedBytes };
    },
  };
}

let gc: (() => void) | undefined;
/**
 * Runs a full garbage collection, so heap figures show what is retained rather than what V8 has
 * not collected yet (the flag can be set at run time; `gc` then exists in a fresh context).
 */
export function collectGarbage(): void {
  if (!gc) {
    v8.setFlagsFromString('--expose-gc');
    gc = vm.runInNewContext('gc') as () => void;
  }
  gc();
}
