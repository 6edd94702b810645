/**
 * A map of at most `maxEntries` that forgets the least recently used entry when a new one would
 * pass the bound: for caches whose misses cost more than a read (TLS sessions: a full handshake).
 * Reading an entry through `get` makes it the most recent.
 */
export class LruMap<K, V> {
  readonly #entries = new Map<K, V>();

  /** `onEvict` is told of each entry forgotten to make room (not of those deleted or replaced). */
  constructor(
    readonly maxEntries: number,
    private readonly onEvict?: (key: K, value: V) => void,
  ) {
    if (!Number.isInteger(maxEntries) || maxEntries < 0)
      throw new RangeError('maxEntries must be an integer of 0 or more');
  }

  get size(): number {
    return this.#entries.size;
  }

  get(key: K): V | undefined {
    const value = this.#entries.get(key);
    if (value === undefined) return undefined;
    // A Map iterates in insertion order: inserted again, the entry is the newest.
    this.#entries.delete(key);
    this.#entries.set(key, value);
    return value;
  }

  /** Stores `value` as the newest entry; with a bound of 0, stores nothing. */
  set(key: K, value: V): void {
    if (this.maxEntries === 0) return;
    this.#entries.delete(key);
    if (this.#entries.size >= this.maxEntries) {
      const oldest = this.#entries.entries().next();
      if (!oldest.done) {
        this.#entries.delete(oldest.value[0]);
        this.onEvict?.(oldest.value[0], oldest.value[1]);
      }
    }
    this.#entries.set(key, value);
  }

  delete(key: K): boolean {
    return this.#entries.delete(key);
  }

  values(): IterableIterator<V> {
    return this.#entries.values();
  }
}
