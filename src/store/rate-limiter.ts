import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

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
    private readonly keys: RedisKeys,
  ) {}

  async hit(subject: string, nowMs: number): Promise<number> {
    const key = this.keys.rateWindow(subject, Math.floor(nowMs / 1000));
    const results = await this.redis.multi().incr(key).pexpire(key, 2_000).exec();
    return Number(results?.[0]?.[1] ?? 0);
  }
}
