/**
 * Splits `items` into consecutive chunks, in order, of at most `countMax` items and `bytesMax` bytes
 * by `sizeOf` (an item larger than `bytesMax` makes a chunk of its own).
 */
export function chunksOf<T>(
  items: readonly T[],
  sizeOf: (item: T) => number,
  bytesMax: number,
  countMax = Infinity,
): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = sizeOf(item);
    if (current.length > 0 && (current.length >= countMax || bytes + size > bytesMax)) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

/**
 * Bytes one Redis command should carry at most. A command travels as one string (built by the
 * client, and a reply as one string out of it); past about 128 KB V8 keeps such a string in its
 * large-object space, each allocated and faulted in from the system on its own, which measured 50
 * times slower per byte than a smaller one on the benchmark machine, and never collected young.
 */
export const COMMAND_BYTES_MAX = 96 * 1024;

/** A body's bytes as the chunking counts them: its UTF-16 length with room for escaping and non-ASCII text. */
export const bodyBytesEstimate = (body: string): number => body.length * 1.1;

/** A copy of `items` sorted by `keyOf` (stable: items of one key keep their order), so each key's items are side by side. */
export function sortedBy<T>(items: readonly T[], keyOf: (item: T) => string): T[] {
  return [...items].sort((a, b) => {
    const [x, y] = [keyOf(a), keyOf(b)];
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

/** The runs of consecutive items with the same key, in order, each with its key. */
export function runsOf<T>(items: readonly T[], keyOf: (item: T) => string): [key: string, run: T[]][] {
  const runs: [string, T[]][] = [];
  for (const item of items) {
    const key = keyOf(item);
    const last = runs.at(-1);
    if (last !== undefined && last[0] === key) last[1].push(item);
    else runs.push([key, [item]]);
  }
  return runs;
}
