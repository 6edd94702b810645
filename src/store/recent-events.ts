import type { RedisKeys } from './keys.js';
import { slotGroups, type Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

/** How many recent events are kept per webhook, and for how long. */
const RECENT_EVENTS_MAX = 5;
const RECENT_EVENTS_TTL_MS = 24 * 3_600_000;

/** Lists written by one script call at most. */
const LISTS_PER_CALL_MAX = 250;

/**
 * The last events ingest matched to each webhook that has a payload filter, whether the filter let
 * them through or not, so the filter dry run can be tried on what really arrives. Written once per
 * webhook per ingested batch (its batch's last event), beside the batch's enqueue: one script call
 * per slot (one in all on a single server), nothing for webhooks without a filter.
 */
export class RedisRecentEvents {
  private readonly rememberScript: ScriptCall<[routing: string], ScriptArg[], number>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
  ) {
    this.rememberScript = defineScriptFile(redis, 'recent-events-remember', 1);
  }

  /** Keeps `body` as the newest of each webhook's recent events. */
  async remember(entries: ReadonlyMap<string, string>): Promise<void> {
    const lists = [...entries].map(([webhookId, body]) => ({
      key: this.keys.deliveries.recentEvents(webhookId),
      body,
    }));
    await Promise.all(
      slotGroups(this.redis, lists, (list) => list.key, LISTS_PER_CALL_MAX).map((group) =>
        this.rememberScript(
          [group[0]!.key],
          RECENT_EVENTS_MAX,
          RECENT_EVENTS_TTL_MS,
          ...group.flatMap(({ key, body }) => [key, body]),
        ),
      ),
    );
  }

  /** The webhook's newest recent event body, if any. */
  async latest(webhookId: string): Promise<string | undefined> {
    return (await this.redis.lindex(this.keys.deliveries.recentEvents(webhookId), 0)) ?? undefined;
  }
}
