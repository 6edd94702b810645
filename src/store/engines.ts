import { randomUUID } from 'node:crypto';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** A running engine as the others see it. */
export interface EngineEntry {
  pid: number;
  host: string;
  /** `all` (hookline start), `api` or `worker`. */
  role: string;
  version: string;
  /** Where its admin API listens, when it runs one. */
  api?: string;
  startedAt: string;
  /** The settings every engine on one Redis must share, by the variable that sets each, as text. */
  settings: Record<string, string>;
}

/** How often a running engine refreshes its entry, and when an entry not refreshed is a crashed engine's. */
const REFRESH_MS = 10_000;
const STALE_MS = 35_000;

/**
 * The engines running on one Redis (one key prefix), so that a starting engine can tell whom it
 * joins and whether they run with other settings. Many engines on one Redis are the design (API
 * replicas, workers); settings that differ between them are a mistake that shows only in what
 * happens to deliveries (one worker's SSRF guard blocks what another's lets through). Each engine
 * keeps an entry refreshed while it runs and removes it when it stops; one that crashed leaves an
 * entry that is ignored, and dropped, once it is stale.
 */
export class RedisEngineRegistry {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'engines'>,
    private readonly nowMs: () => number = Date.now,
  ) {}

  /** The engines whose entries are fresh; drops the stale ones. */
  async running(): Promise<EngineEntry[]> {
    const entries = await this.redis.hgetall(this.keys.engines);
    const live: EngineEntry[] = [];
    const stale: string[] = [];
    for (const [id, json] of Object.entries(entries)) {
      const { seenAtMs, ...entry } = JSON.parse(json) as EngineEntry & { seenAtMs: number };
      if (this.nowMs() - seenAtMs > STALE_MS) stale.push(id);
      else live.push(entry);
    }
    if (stale.length > 0) await this.redis.hdel(this.keys.engines, ...stale);
    return live.sort((a, b) => a.startedAt.localeCompare(b.startedAt));
  }

  /** Records `entry` and keeps it fresh until leave(), which removes it. */
  async join(entry: EngineEntry): Promise<{ leave(): Promise<void> }> {
    const id = randomUUID();
    const write = () => this.redis.hset(this.keys.engines, id, JSON.stringify({ ...entry, seenAtMs: this.nowMs() }));
    await write();
    // A refresh lost to an outage is made good by the next; an engine cut off for longer looks crashed meanwhile.
    const timer = setInterval(() => void write().catch(() => undefined), REFRESH_MS);
    timer.unref();
    return {
      leave: async () => {
        clearInterval(timer);
        await this.redis.hdel(this.keys.engines, id);
      },
    };
  }
}
