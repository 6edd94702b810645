import { compileFilter, type CompiledFilter, type FilterNode } from '../domain/filter.js';

/** Where the filters come from: each webhook's, in one round trip (undefined: none, or no such webhook). */
export interface FilterSource {
  filtersOf(webhookIds: readonly string[]): Promise<(FilterNode | undefined)[]>;
}

/**
 * The payload filters of webhooks, compiled, for ingest: a short-lived per-process cache, so a
 * batch reads only the webhooks it has not seen lately (one round trip for those, none when all
 * are known), and a filter is compiled once however many events it checks. A changed filter
 * applies within `ttlMs`, as any webhook change reaches workers.
 */
export class IngestFilters {
  private readonly entries = new Map<string, { check: CompiledFilter | undefined; expiresAtMs: number }>();
  /** Compiled filters by their JSON: webhooks that share a filter share its closures. */
  private readonly compiled = new Map<string, CompiledFilter>();

  constructor(
    private readonly source: FilterSource,
    private readonly ttlMs: number,
    private readonly nowMs: () => number = Date.now,
    private readonly maxEntries = 10_000,
  ) {}

  /** Each webhook's compiled filter (undefined: it takes every event), in the order asked. */
  async checksOf(webhookIds: readonly string[]): Promise<(CompiledFilter | undefined)[]> {
    const now = this.nowMs();
    const missing = [...new Set(webhookIds.filter((id) => !((this.entries.get(id)?.expiresAtMs ?? 0) > now)))];
    if (missing.length > 0) {
      const filters = await this.source.filtersOf(missing);
      if (this.entries.size + missing.length > this.maxEntries) this.entries.clear();
      missing.forEach((id, i) => this.entries.set(id, { check: this.compile(filters[i]), expiresAtMs: now + this.ttlMs }));
    }
    return webhookIds.map((id) => this.entries.get(id)?.check);
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
