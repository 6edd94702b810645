/** An entry of LruMap's recency list. */
interface Node<K, V> {
  key: K;
  value: V;
  /** The next older entry; undefined for the oldest. */
  older: Node<K, V> | undefined;
  /** The next newer entry; undefined for the newest. */
  newer: Node<K, V> | undefined;
}

/**
 * A map of at most `maxEntries` that forgets the least recently used entry when a new one would
 * pass the bound: for caches whose misses cost more than a read (TLS sessions: a full handshake).
 * Reading an entry through `get` makes it the most recent.
 *
 * The recency order is a linked list beside the Map, so every operation is O(1) at any size. A Map
 * alone (delete and set again to move an entry, evict the first one its iterator gives) is not: a
 * deleted entry stays a hole at the front of V8's table until the table is rebuilt, and finding the
 * oldest entry skips every hole, about 23 µs an eviction at 20,000 entries, paid once a delivery by
 * the journal's map of delivered attempts when it was built that way.
 */
export class LruMap<K, V> {
  readonly #entries = new Map<K, Node<K, V>>();
  #oldest: Node<K, V> | undefined = undefined;
  #newest: Node<K, V> | undefined = undefined;

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
    const node = this.#entries.get(key);
    if (node === undefined) return undefined;
    this.#unlink(node);
    this.#pushNewest(node);
    return node.value;
  }

  /** Stores `value` as the newest entry; with a bound of 0, stores nothing. */
  set(key: K, value: V): void {
    if (this.maxEntries === 0) return;
    const existing = this.#entries.get(key);
    if (existing !== undefined) {
      existing.value = value;
      this.#unlink(existing);
      this.#pushNewest(existing);
      return;
    }
    if (this.#entries.size >= this.maxEntries) {
      const oldest = this.#oldest;
      if (oldest !== undefined) {
        this.#unlink(oldest);
        this.#entries.delete(oldest.key);
        this.onEvict?.(oldest.key, oldest.value);
      }
    }
    const node: Node<K, V> = { key, value, older: undefined, newer: undefined };
    this.#entries.set(key, node);
    this.#pushNewest(node);
  }

  delete(key: K): boolean {
    const node = this.#entries.get(key);
    if (node === undefined) return false;
    this.#unlink(node);
    return this.#entries.delete(key);
  }

  /** The values, oldest first. */
  *values(): IterableIterator<V> {
    for (let node = this.#oldest; node !== undefined; node = node.newer) yield node.value;
  }

  #unlink(node: Node<K, V>): void {
    if (node.older === undefined) this.#oldest = node.newer;
    else node.older.newer = node.newer;
    if (node.newer === undefined) this.#newest = node.older;
    else node.newer.older = node.older;
    node.older = undefined;
    node.newer = undefined;
  }

  #pushNewest(node: Node<K, V>): void {
    node.older = this.#newest;
    if (this.#newest === undefined) this.#oldest = node;
    else this.#newest.newer = node;
    this.#newest = node;
  }
}
