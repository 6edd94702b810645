import { compileFilter, type CompiledFilter, type FilterNode } from '../domain/filter.js';
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
  private readonly entries = new Map<string, { check: CompiledFilter | undefined; expiresAtMs: number }>();
  /** Bumped by every change heard: a read that started before one must not fill the cache. */
  private generation = 0;
  /** Compiled filters by their JSON: webhooks that share a filter share its closures. */
  private readonly compiled = new Map<string, CompiledFilter>();

  constructor(
    private readonly source: FilterSource,
    private readonly ttlMs: () => number,
    private readonly nowMs: () => number = Date.now,
    private readonly maxEntries = 10_000,
  ) {}

  /** Each webhook's compiled filter (undefined: it takes every event), in the order asked. */
  async checksOf(webhookIds: readonly string[]): Promise<(CompiledFilter | undefined)[]> {
    const now = this.nowMs();
    const known = new Map<string, CompiledFilter | undefined>();
    const missing = new Set<string>();
    for (const id of webhookIds) {
      const entry = this.entries.get(id);
      if (entry !== undefined && entry.expiresAtMs > now) known.set(id, entry.check);
      else missing.add(id);
    }
    if (missing.size > 0) {
      const generation = this.generation;
      const ids = [...missing];
      const filters = await this.source.filtersOf(ids);
      ids.forEach((id, i) => known.set(id, this.compile(filters[i])));
      // A change heard meanwhile may have made what was read stale: use it for this batch only.
      if (generation === this.generation) {
        if (this.entries.size + ids.length > this.maxEntries) this.entries.clear();
        const expiresAtMs = now + this.ttlMs();
        for (const id of ids) this.entries.set(id, { check: known.get(id), expiresAtMs });
      }
    }
    return webhookIds.map((id) => known.get(id));
  }

  changed(change: WebhookChange): void {
    this.generation += 1;
    this.entries.delete(change.webhookId);
  }

  reset(): void {
    this.generation += 1;
    this.entries.clear();
  }

  private compile(filter: FilterNode | undefined): CompiledFilter | undefined {
    if (filter === undefined) return undefined;
    const text = JSON.stringify(filter);
    let check = this.compiled.get(text);
    if (check === undefined) {
      if (this.compiled.size >= this.maxEntries) this.compiled.clear();
      check = compileFilter(filter);
      this.compiled.set(text, check);
    }
    return check;
  }
}
