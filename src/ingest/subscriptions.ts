import type { WebhookEventType } from '../domain/events.js';
import type { WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';
import type { Subscription, SubscriptionLookup } from './ingest.js';

type Entry = { found: Subscription | undefined; expiresAtMs: number };

/**
 * Ingest's subscription lookup, cached per process: which webhook (if any) each (vendor, event type)
 * has, the "none" answers included, so a batch whose pairs are all known makes no round trip, and
 * the registry's one slot is read once in a while rather than once per batch. A vendor's answers are
 * dropped as soon as the process hears of a change to one of its webhooks (`changed`, from the
 * change feed, or at once for a change this process made), and any answer is read again after
 * `ttlMs()` at the latest.
 */
export class CachedSubscriptions implements SubscriptionLookup, WebhookChangeListener {
  private readonly byVendor = new Map<string, Map<WebhookEventType, Entry>>();
  private size = 0;
  /** Bumped by every change heard: a read that started before one must not fill the cache. */
  private generation = 0;

  constructor(
    private readonly source: SubscriptionLookup,
    private readonly ttlMs: () => number,
    private readonly nowMs: () => number = Date.now,
    private readonly maxEntries = 100_000,
  ) {}

  async matchMany(
    pairs: readonly { vendorId: string; eventType: WebhookEventType }[],
  ): Promise<(Subscription | undefined)[]> {
    const now = this.nowMs();
    const answers = new Array<Subscription | undefined>(pairs.length);
    // Pairs to read, each once however often the batch holds it, with the places its answer goes.
    const unknown = new Map<string, { pair: { vendorId: string; eventType: WebhookEventType }; at: number[] }>();
    pairs.forEach((pair, i) => {
      const entry = this.byVendor.get(pair.vendorId)?.get(pair.eventType);
      if (entry !== undefined && entry.expiresAtMs > now) {
        answers[i] = entry.found;
        return;
      }
      const key = `${pair.vendorId}\n${pair.eventType}`;
      const read = unknown.get(key);
      if (read) read.at.push(i);
      else unknown.set(key, { pair, at: [i] });
    });
    if (unknown.size === 0) return answers;

    const generation = this.generation;
    const reads = [...unknown.values()];
    const found = await this.source.matchMany(reads.map((r) => r.pair));
    reads.forEach((read, j) => {
      for (const i of read.at) answers[i] = found[j];
    });
    // A change heard meanwhile may have made what was read stale: use it for this batch only.
    if (generation === this.generation) {
      if (this.size + reads.length > this.maxEntries) this.reset();
      const expiresAtMs = now + this.ttlMs();
      reads.forEach(({ pair }, j) => {
        let ofVendor = this.byVendor.get(pair.vendorId);
        if (ofVendor === undefined) {
          ofVendor = new Map();
          this.byVendor.set(pair.vendorId, ofVendor);
        }
        if (!ofVendor.has(pair.eventType)) this.size += 1;
        ofVendor.set(pair.eventType, { found: found[j], expiresAtMs });
      });
    }
    return answers;
  }

  changed(change: WebhookChange): void {
    this.generation += 1;
    this.size -= this.byVendor.get(change.vendorId)?.size ?? 0;
    this.byVendor.delete(change.vendorId);
  }

  reset(): void {
    this.generation += 1;
    this.byVendor.clear();
    this.size = 0;
  }
}
