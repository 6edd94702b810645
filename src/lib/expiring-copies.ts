import { CappedMap } from './capped-map.js';

/**
 * Copies of what a slower source answered, each kept until it expires, in a process that also
 * hears of changes to what they copy. A change forgets the copy; and because a read may be under
 * way while the change is heard, every forget moves a generation on, and what a read started
 * before it brings back is not stored (`store` with an older ticket does nothing): a read racing a
 * change cannot bring back the copy the change made stale. Bounded like a CappedMap.
 */
export class ExpiringCopies<K, V> {
  readonly #entries: CappedMap<K, { value: V; expiresAtMs: number }>;
  #generation = 0;

  constructor(maxEntries: number) {
    this.#entries = new CappedMap(maxEntries);
  }

  /** The copy of `key` unless it has expired at `nowMs` (`value` may itself be undefined: "none" is an answer too). */
  fresh(key: K, nowMs: number): { value: V } | undefined {
    const entry = this.#entries.get(key);
    return entry !== undefined && entry.expiresAtMs > nowMs ? entry : undefined;
  }

  /** Taken before a read of the source starts; its copies are stored only if nothing is forgotten meanwhile. */
  ticket(): number {
    return this.#generation;
  }

  /** Stores the copy of `key` read under `ticket`, unless a change was heard since (then false). */
  store(ticket: number, key: K, value: V, expiresAtMs: number): boolean {
    if (ticket !== this.#generation) return false;
    this.#entries.set(key, { value, expiresAtMs });
    return true;
  }

  /** Stores the copies of `keys` read together under `ticket`, all or (after a change) none. */
  storeMany(ticket: number, keys: readonly K[], valueOf: (key: K) => V, expiresAtMs: number): boolean {
    if (ticket !== this.#generation) return false;
    this.#entries.makeRoom(keys.length);
    for (const key of keys) this.#entries.set(key, { value: valueOf(key), expiresAtMs });
    return true;
  }

  /** Forgets the copy of `key`, and refuses what reads already under way bring back. */
  forget(key: K): void {
    this.#generation += 1;
    this.#entries.delete(key);
  }

  /** Forgets every copy, and refuses what reads already under way bring back. */
  clear(): void {
    this.#generation += 1;
    this.#entries.clear();
  }
}
