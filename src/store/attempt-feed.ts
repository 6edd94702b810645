import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** One finished attempt as `hookline deliveries tail` shows it (the API's field names). */
export interface FeedEntry {
  at: string;
  vendor_id: string;
  webhook_id: string;
  event_type: string;
  event_id: string;
  delivery_id: string;
  attempt: number;
  outcome: string;
  status_code: number | null;
  duration_ms: number;
  /** delivered, retry, dead or disable. */
  decision: string;
}

/** How often a worker looks whether anyone listens, and how long a listener's mark lasts. */
const CHECK_EVERY_MS = 1_000;
const LISTENING_TTL_MS = 5_000;
/**
 * How long a listener waits after marking itself before it says it watches: by then every worker's
 * last answer to "does anyone listen?" was asked after the mark (a margin for the round trip).
 */
const WATCHING_AFTER_MS = CHECK_EVERY_MS + 100;
/** Entries sent in one message at most; and how long a worker gathers them. */
const BATCH_MAX = 200;
const FLUSH_AFTER_MS = 100;

/**
 * A live feed of finished attempts, for watching a fix land. It costs nothing while nobody listens:
 * a listener keeps a short-lived mark in Redis, and workers publish (in small batches, at most ten
 * messages a second per worker) only while they see it. A live view, not a log: entries published
 * while no listener was connected are gone. An attempt that finishes while a worker is asking
 * whether anyone listens waits for the answer (the first attempt after a quiet spell starts that
 * question), and a listener says it watches only once every worker has asked since its mark, so
 * every attempt that finishes after that is shown.
 */
export class RedisAttemptFeed {
  private listening = false;
  private checkedAtMs = -Infinity;
  private checking = false;
  private buffer: FeedEntry[] = [];
  /** Entries that finished during a check: the check's answer decides whether they are published. */
  private held: FeedEntry[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'attemptFeed'>,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /** Whether an entry published now may reach a listener (else building one is wasted work). */
  wanted(): boolean {
    this.refresh();
    return this.checking || this.listening;
  }

  /** Called for every finished attempt; never throws, never waits. */
  publish(entry: FeedEntry): void {
    this.refresh();
    if (this.checking) {
      if (this.held.length < BATCH_MAX * 10) this.held.push(entry);
    } else if (this.listening) this.send(entry);
  }

  private send(entry: FeedEntry): void {
    if (this.buffer.length < BATCH_MAX * 10) this.buffer.push(entry);
    this.timer ??= setTimeout(() => this.flush(), FLUSH_AFTER_MS);
  }

  /** Publishes what is buffered now (also on close). */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.buffer.length > 0) {
      const batch = this.buffer.splice(0, BATCH_MAX);
      void this.redis.publish(this.keys.attemptFeed.channel, JSON.stringify(batch)).catch(() => undefined);
    }
  }

  private refresh(): void {
    const now = this.nowMs();
    if (this.checking || now - this.checkedAtMs < CHECK_EVERY_MS) return;
    this.checking = true;
    this.checkedAtMs = now;
    this.redis
      .exists(this.keys.attemptFeed.listening)
      .then((n) => (this.listening = n > 0))
      .catch(() => (this.listening = false))
      .finally(() => {
        this.checking = false;
        const held = this.held.splice(0);
        if (this.listening) held.forEach((entry) => this.send(entry));
      });
  }

  /**
   * Listens until `signal` aborts: calls `onListening` once every worker sees it (a second after it
   * subscribed), and `onEntries` with each batch published. Uses a connection of its own (a
   * subscribed connection can do nothing else), which `watch` is told about so that its errors are
   * heard (else they are ignored). After a reconnect it marks itself again at once, rather than at
   * the next refresh of its mark: a Redis that restarted without its data has lost the mark.
   */
  async listen(
    onEntries: (entries: FeedEntry[]) => void,
    signal: AbortSignal,
    options: { onListening?: () => void; watch?: (connection: Redis) => void } = {},
  ): Promise<void> {
    const subscriber = this.redis.duplicate();
    if (options.watch) options.watch(subscriber);
    else subscriber.on('error', () => undefined);
    const mark = () => this.redis.set(this.keys.attemptFeed.listening, '1', 'PX', LISTENING_TTL_MS);
    const keepMarked = setInterval(() => void mark().catch(() => undefined), LISTENING_TTL_MS / 2);
    try {
      subscriber.on('message', (_channel: string, message: string) => {
        try {
          onEntries(JSON.parse(message) as FeedEntry[]);
        } catch {
          // Not a batch this version understands: skip it.
        }
      });
      await subscriber.subscribe(this.keys.attemptFeed.channel);
      // Subscribed again by ioredis itself on each later 'ready'.
      subscriber.on('ready', () => void mark().catch(() => undefined));
      await mark();
      await new Promise((resolve) => setTimeout(resolve, WATCHING_AFTER_MS));
      options.onListening?.();
      await new Promise<void>((resolve) => {
        if (signal.aborted) return resolve();
        signal.addEventListener('abort', () => resolve(), { once: true });
      });
    } finally {
      clearInterval(keepMarked);
      subscriber.disconnect();
    }
  }
}
