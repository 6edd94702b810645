import { compileFieldSelection, type DeliveryShape } from '../domain/field-selection.js';
import { compileFilter, type CompiledFilter, type FilterNode } from '../domain/filter.js';
import { CappedMap } from '../lib/capped-map.js';
import { ExpiringCopies } from '../lib/expiring-copies.js';
import type { WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';

/** Where the shapes come from: each webhook's, in one round trip (undefined: no such webhook). */
export interface FilterSource {
  shapesOf(webhookIds: readonly string[]): Promise<(DeliveryShape | undefined)[]>;
}

/** A webhook's shape, compiled: which events it gets (undefined: every one) and what of their data (undefined: all of it). */
export interface IngestRule {
  check: CompiledFilter | undefined;
  pick: ((data: unknown) => unknown) | undefined;
}

/**
 * The payload filters and field selections of webhooks, compiled, for ingest: a per-process cache,
 * so a batch reads only the webhooks it has not seen lately (one round trip for those, none when all
 * are known), and a filter is compiled once however many events it checks. A change applies as soon
 * as the process hears of it (`changed`), and after `ttlMs()` at the latest.
 */
export class IngestFilters implements WebhookChangeListener {
  private readonly copies: ExpiringCopies<string, IngestRule | undefined>;
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

  /** Each webhook's rule (undefined: it takes every event whole), in the order asked. */
  async rulesOf(webhookIds: readonly string[]): Promise<(IngestRule | undefined)[]> {
    const now = this.nowMs();
    const known = new Map<string, IngestRule | undefined>();
    const missing = new Set<string>();
    for (const id of webhookIds) {
      const entry = this.copies.fresh(id, now);
      if (entry !== undefined) known.set(id, entry.value);
      else missing.add(id);
    }
    if (missing.size > 0) {
      const ticket = this.copies.ticket();
      const ids = [...missing];
      const shapes = await this.source.shapesOf(ids);
      ids.forEach((id, i) => known.set(id, this.ruleOf(shapes[i])));
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

  private ruleOf(shape: DeliveryShape | undefined): IngestRule | undefined {
    if (shape === undefined || (shape.filter === undefined && shape.includeFields === undefined)) return undefined;
    return {
      check: this.compile(shape.filter),
      pick: shape.includeFields === undefined ? undefined : compileFieldSelection(shape.includeFields),
    };
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
