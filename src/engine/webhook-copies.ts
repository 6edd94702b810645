import type { Logger } from '../logger.js';
import type { RedisWebhookChanges, WebhookChange, WebhookChangeListener } from '../store/webhook-changes.js';

/**
 * How long a process may use a webhook it read (ingest's subscription lookup and filters, a worker's
 * webhook cache): long while the change feed is live, since a change drops the copies at once; short
 * while it is not (before the first subscription, during a reconnect), when only time makes a
 * change apply.
 */
const WEBHOOK_COPY_TTL_LIVE_MS = 60_000;
const WEBHOOK_COPY_TTL_MS = 2_000;

/**
 * The caches of webhooks in one process and what keeps them current: `tell` (the registry calls it
 * after every change it stores) drops this process's copies at once and publishes the change for the
 * other processes; `listen` hears theirs until aborted.
 */
export function webhookCopyCaches(feed: RedisWebhookChanges, logger: Logger | undefined) {
  const caches: WebhookChangeListener[] = [];
  let live = false;
  const all: WebhookChangeListener = {
    changed: (change) => {
      for (const cache of caches) cache.changed(change);
    },
    reset: () => {
      for (const cache of caches) cache.reset();
    },
  };
  return {
    ttlMs: () => (live ? WEBHOOK_COPY_TTL_LIVE_MS : WEBHOOK_COPY_TTL_MS),
    add<T extends WebhookChangeListener>(cache: T): T {
      caches.push(cache);
      return cache;
    },
    tell: (change: WebhookChange): void => {
      all.changed(change);
      // Lost, other processes apply the change when their copies expire (WEBHOOK_COPY_TTL_LIVE_MS at most).
      feed
        .publish(change)
        .catch((error: Error) =>
          logger?.warn({ err: error.message, webhookId: change.webhookId }, 'webhook change not published'),
        );
    },
    listen(signal: AbortSignal): Promise<void> {
      return feed.listen(all, signal, (up) => (live = up));
    },
  };
}
