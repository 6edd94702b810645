import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** A webhook that was created, changed, disabled or deleted, as the processes caching it hear of it. */
export interface WebhookChange {
  webhookId: string;
  vendorId: string;
}

/** What a cache does with the feed: forget one webhook, or everything (it may have missed changes). */
export interface WebhookChangeListener {
  changed(change: WebhookChange): void;
  /** The feed (re)started: changes may have been missed meanwhile. */
  reset(): void;
}

/**
 * Tells every process of the change of a webhook at once (Redis pub/sub), so that ingest's
 * subscription lookup and the workers' webhook copies can be kept in memory without a round trip per
 * event and still answer a change within milliseconds. Pub/sub is at most once: a listener forgets
 * everything whenever its subscription (re)starts, and the caches keep a time limit as a backstop.
 */
export class RedisWebhookChanges {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'webhooks'>,
  ) {}

  /** Publishes a change; a failure is only reported to the caller (caches then catch up by their time limit). */
  async publish(change: WebhookChange): Promise<void> {
    await this.redis.publish(this.keys.webhooks.changes, JSON.stringify(change));
  }

  /**
   * Listens until `signal` aborts; resolves once subscribed. Uses a connection of its own (a
   * subscribed connection can do nothing else). `onLive(true)` comes with a reset once the
   * subscription is confirmed, first and after each reconnect; `onLive(false)` with a reset when the
   * connection drops, as changes published meanwhile will be missed.
   */
  async listen(
    listener: WebhookChangeListener,
    signal: AbortSignal,
    onLive: (live: boolean) => void = () => undefined,
  ): Promise<void> {
    const subscriber = this.redis.duplicate();
    const channel = this.keys.webhooks.changes;
    subscriber.on('error', () => undefined);
    const onAbort = () => subscriber.disconnect();
    signal.addEventListener('abort', onAbort, { once: true });
    subscriber.on('message', (_channel: string, message: string) => {
      let change: Partial<WebhookChange>;
      try {
        change = JSON.parse(message) as Partial<WebhookChange>;
      } catch {
        // Not a message this version understands: forget everything rather than guess.
        return listener.reset();
      }
      if (typeof change.webhookId === 'string' && typeof change.vendorId === 'string')
        listener.changed({ webhookId: change.webhookId, vendorId: change.vendorId });
      else listener.reset();
    });
    let live = false;
    const confirmed = () => {
      live = true;
      listener.reset();
      onLive(true);
    };
    subscriber.on('close', () => {
      if (!live) return;
      live = false;
      listener.reset();
      onLive(false);
    });
    // After a reconnect the connection subscribes again by itself, but says it is ready before the
    // subscription is in place: subscribing once more (harmless) answers when it is.
    let first = true;
    subscriber.on('ready', () => {
      if (first || signal.aborted) return;
      subscriber.subscribe(channel).then(confirmed, () => undefined);
    });
    try {
      await subscriber.subscribe(channel);
    } catch (error) {
      // The caller tries again with the same signal while Redis is down: a listener left behind per
      // attempt would pile up (Node warns past ten).
      signal.removeEventListener('abort', onAbort);
      subscriber.disconnect();
      throw error;
    }
    first = false;
    confirmed();
  }
}
