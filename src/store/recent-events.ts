import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** How many recent events are kept per webhook, and for how long. */
const RECENT_EVENTS_MAX = 5;
const RECENT_EVENTS_TTL_MS = 24 * 3_600_000;

/**
 * The last events ingest matched to each webhook that has a payload filter, whether the filter let
 * them through or not, so the filter dry run can be tried on what really arrives. Written once per
 * webhook per ingested batch (its batch's last event), pipelined with the batch's enqueue: the cost
 * is two commands per filtered webhook per batch, none for webhooks without a filter.
 */
export class RedisRecentEvents {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
  ) {}

  /** Keeps `body` as the newest of each webhook's recent events. */
  async remember(entries: ReadonlyMap<string, string>): Promise<void> {
    await Promise.all(
      [...entries].map(async ([webhookId, body]) => {
        const key = this.keys.deliveries.recentEvents(webhookId);
        await this.redis
          .multi()
          .lpush(key, body)
          .ltrim(key, 0, RECENT_EVENTS_MAX - 1)
          .pexpire(key, RECENT_EVENTS_TTL_MS)
          .exec();
      }),
    );
  }

  /** The webhook's newest recent event body, if any. */
  async latest(webhookId: string): Promise<string | undefined> {
    return (await this.redis.lindex(this.keys.deliveries.recentEvents(webhookId), 0)) ?? undefined;
  }
}
