/**
 * A map that empties itself when full, for the per-process caches whose every entry can be read
 * again (keys, compiled filters, copies of webhooks): a bound on memory that costs no bookkeeping
 * on the hot path, at the price of a burst of reads after it empties, which at these bounds (far
 * above what a process meets) is rare.
 */
export class CappedMap<K, V> extends Map<K, V> {
  constructor(private readonly maxEntries: number) {
    super();
  }

  /** Stores `value`, emptying the map first when it is full and `key` is new. */
  override set(key: K, value: V): this {
    if (this.size >= this.maxEntries && !this.has(key)) this.clear();
    return super.set(key, value);
  }

  /** Empties the map unless `count` more entries fit, so that a batch stored next stays whole. */
  makeRoom(count: number): void {
    if (this.size + count > this.maxEntries) this.clear();
  }
}
