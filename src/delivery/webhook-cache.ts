import type { Webhook } from '../domain/webhook.js';
import { ExpiringCopies } from '../lib/expiring-copies.js';
import type { WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';
import type { WebhookSource } from '../store/webhooks.js';

/**
 * A per-process cache in front of the webhook registry, so deliveries to a webhook read it once in a
 * while, not once each. A change (PATCH, DELETE, disable) drops the copy as soon as the process hears
 * of it (`changed`, from the change feed), and any copy is read again after `ttlMs()` at the latest.
 */
export class CachedWebhookSource implements WebhookSource, WebhookChangeListener {
  private readonly copies: ExpiringCopies<string, Webhook | undefined>;

  constructor(
    private readonly source: Pick<WebhookSource, 'getById' | 'disable'>,
    /** How long a copy may be used now (long while the change feed is live, short while it is not). */
    private readonly ttlMs: () => number,
    private readonly nowMs: () => number = Date.now,
    maxEntries = 10_000,
  ) {
    this.copies = new ExpiringCopies(maxEntries);
  }

  async getById(webhookId: string): Promise<Webhook | undefined> {
    const now = this.nowMs();
    const hit = this.copies.fresh(webhookId, now);
    if (hit) return hit.value;
    // An invalidation while the read is under way must not let it refill the cache.
    const ticket = this.copies.ticket();
    const webhook = await this.source.getById(webhookId);
    const ttlMs = this.ttlMs();
    if (ttlMs > 0) this.copies.store(ticket, webhookId, webhook, now + ttlMs);
    return webhook;
  }

  async getFresh(webhookId: string): Promise<Webhook | undefined> {
    this.invalidate(webhookId);
    return this.getById(webhookId);
  }

  changed(change: WebhookChange): void {
    this.invalidate(change.webhookId);
  }

  reset(): void {
    this.copies.clear();
  }

  async disable(webhookId: string, reason: 'gone' | 'failing'): Promise<boolean> {
    // Forgotten before and after the write, and reads in flight meanwhile are not cached: none of
    // them can bring back the enabled copy for another ttlMs.
    this.invalidate(webhookId);
    try {
      return await this.source.disable(webhookId, reason);
    } finally {
      this.invalidate(webhookId);
    }
  }

  private invalidate(webhookId: string): void {
    this.copies.forget(webhookId);
  }
}
