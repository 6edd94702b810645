import type { Webhook } from '../domain/webhook.js';
import type { WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';
import type { WebhookSource } from '../store/webhooks.js';

/**
 * A per-process cache in front of the webhook registry, so deliveries to a webhook read it once in a
 * while, not once each. A change (PATCH, DELETE, disable) drops the copy as soon as the process hears
 * of it (`changed`, from the change feed), and any copy is read again after `ttlMs()` at the latest.
 */
export class CachedWebhookSource implements WebhookSource, WebhookChangeListener {
  private readonly entries = new Map<string, { webhook: Webhook | undefined; expiresAtMs: number }>();
  /** Bumped by every invalidation: a read that started before one must not refill the cache. */
  private generation = 0;

  constructor(
    private readonly source: Pick<WebhookSource, 'getById' | 'disable'>,
    /** How long a copy may be used now (long while the change feed is live, short while it is not). */
    private readonly ttlMs: () => number,
    private readonly nowMs: () => number = Date.now,
    private readonly maxEntries = 10_000,
  ) {}

  async getById(webhookId: string): Promise<Webhook | undefined> {
    const now = this.nowMs();
    const hit = this.entries.get(webhookId);
    if (hit && hit.expiresAtMs > now) return hit.webhook;
    const generation = this.generation;
    const webhook = await this.source.getById(webhookId);
    const ttlMs = this.ttlMs();
    if (ttlMs > 0 && generation === this.generation) {
      if (this.entries.size >= this.maxEntries) this.entries.clear();
      this.entries.set(webhookId, { webhook, expiresAtMs: now + ttlMs });
    }
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
    this.generation += 1;
    this.entries.clear();
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
    this.generation += 1;
    this.entries.delete(webhookId);
  }
}
