import { compileFilter, type CompiledFilter, type FilterNode } from '../domain/filter.js';
import { CappedMap } from '../lib/capped-map.js';
import { ExpiringCopies } from '../lib/expiring-copies.js';
import type { WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';

/** Where the filters come from: each webhook's, in one round trip (undefined: none, or no such webhook). */
export interface FilterSource {
  filtersOf(webhookIds: readonly string[]): Promise<(FilterNode | undefined)[]>;
}

/**
 * The payload filters of webhooks, compiled, for ingest: a per-process cache, so a batch reads only
 * the webhooks it has not seen lately (one round trip for those, none when all are known), and a
 * filter is compiled once however many events it checks. A changed filter applies as soon as the
 * process hears of the change (`changed`), and after `ttlMs()` at the latest.
 */
export class IngestFilters implements WebhookChangeListener {
  private readonly copies: ExpiringCopies<string, CompiledFilter | undefined>;
  /** Compiled filters by their JSON: webhooks that share a filter share its closures. */
  private readonly compiled: CappedMap<string, CompiledFilter>;

  constructor(
    private readonly source: FilterSource,
    private readonly ttlMs: () => number,
    private readonly nowMs: () => number = Date.now,
    maxEntries = 10_000,
  ) {
    this.copies = new ExpiringCopies(maxEntries);
    this.compiled = new CappedMap(maxEntries);
  }

  /** Each webhook's compiled filter (undefined: it takes every event), in the order asked. */
  async checksOf(webhookIds: readonly string[]): Promise<(CompiledFilter | undefined)[]> {
    const now = this.nowMs();
    const known = new Map<string, CompiledFilter | undefined>();
    const missing = new Set<string>();
    for (const id of webhookIds) {
      const entry = this.copies.fresh(id, now);
      if (entry !== undefined) known.set(id, entry.value);
      else missing.add(id);
    }
    if (missing.size > 0) {
      const ticket = this.copies.ticket();
      const ids = [...missing];
      const filters = await this.source.filtersOf(ids);
      ids.forEach((id, i) => known.set(id, this.compile(filters[i])));
      // A change heard meanwhile may have made what was read stale: then it serves this batch only.
      this.copies.storeMany(ticket, ids, (id) => known.get(id), now + this.ttlMs());
    }
    return webhookIds.map((id) => known.get(id));
  }

  changed(change: WebhookChange): void {
    this.copies.forget(change.webhookId);
  }

  reset(): void {
    this.copies.clear();
  }

  private compile(filter: FilterNode | undefined): CompiledFilter | undefined {
    if (filter === undefined) return undefined;
    const text = JSON.stringify(filter);
    let check = this.compiled.get(text);
    if (check === undefined) {
      check = compileFilter(filter);
      this.compiled.set(text, check);
    }
    return check;
  }
}
