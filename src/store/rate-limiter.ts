import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/** What the auth hook needs: count a request and learn how many this subject made this second. */
export interface RequestCounter {
  hit(subject: string, nowMs: number): Promise<number>;
}

/**
 * Fixed one-second windows in Redis, shared by every API process: INCR plus a 2 s expiry, one round
 * trip, issued beside the key lookup so it adds no latency of its own.
 */
export class RedisRequestCounter implements RequestCounter {
  constructor(
    private readonly redis: Redis,
    keys: RedisKeys,
    /** The key of a subject's window: an API key's by default, or a client address's (keys.addressRateWindow). */
    private readonly windowKey: (subject: string, second: number) => string = keys.rateWindow,
  ) {}

  async hit(subject: string, nowMs: number): Promise<number> {
    const key = this.windowKey(subject, Math.floor(nowMs / 1000));
    const results = await this.redis.multi().incr(key).pexpire(key, 2_000).exec();
    return Number(results?.[0]?.[1] ?? 0);
  }
}

/** What the ingest route needs: admit a request's events into this second's budget, or refuse them. */
export interface EventBudget {
  /**
   * Counts `count` events for `subject` in the second of `nowMs` and resolves true, unless they would
   * take the second past `limit`: then resolves false and counts nothing.
   */
  take(subject: string, count: number, limit: number, nowMs: number): Promise<boolean>;
}

/**
 * Fixed one-second windows of a cost per subject in Redis, shared by every API process: events an
 * API key ingests (the default), or log entries a vendor's range counts read (keys.replayCountWindow).
 * One script call (one round trip) per request, whatever its cost.
 */
export class RedisEventBudget implements EventBudget {
  /** 1 when the events were counted, 0 when refused. */
  private readonly takeEventsScript: ScriptCall<[key: string], [count: number, limit: number], number>;

  constructor(
    private readonly redis: Redis,
    keys: RedisKeys,
    /** The key of a subject's window. */
    private readonly windowKey: (subject: string, second: number) => string = keys.ingestRateWindow,
  ) {
    this.takeEventsScript = defineScriptFile(redis, 'rate-limiter-take-events', 1);
  }

  async take(subject: string, count: number, limit: number, nowMs: number): Promise<boolean> {
    return (await this.takeEventsScript([this.windowKey(subject, Math.floor(nowMs / 1000))], count, limit)) === 1;
  }

  /** Gives back what a request took at `nowMs` (the same second's window) and did not use. */
  async giveBack(subject: string, count: number, nowMs: number): Promise<void> {
    if (count <= 0) return;
    const key = this.windowKey(subject, Math.floor(nowMs / 1000));
    // With the expiry again: the window may have expired meanwhile, and no key may stay for ever.
    await this.redis.multi().decrby(key, count).pexpire(key, 2_000).exec();
  }
}
