import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';
import type { SecretBox } from './secret-box.js';

/** An OAuth2 access token and when it stops being used (before the endpoint's expiry). */
export interface CachedToken {
  token: string;
  /** Epoch ms after which a new token is fetched instead. */
  useUntilMs: number;
}

/**
 * The OAuth2 access tokens every worker shares: one Redis string per client (token URL and
 * credentials), sealed with the engine's key and expiring when the token stops being used.
 */
export class RedisTokenCache {
  private readonly forgetScript: ScriptCall<[key: string], [sealed: string], number>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly box: SecretBox,
  ) {
    this.forgetScript = defineScriptFile(redis, 'receiver-tokens-forget', 1);
  }

  /** The stored token of `clientId` with the raw value it was read as (for forget), or undefined. */
  async get(clientId: string): Promise<{ cached: CachedToken; stored: string } | undefined> {
    const stored = await this.redis.get(this.keys.receiverToken(clientId));
    if (stored === null) return undefined;
    return { cached: JSON.parse(this.box.open(stored, clientId)) as CachedToken, stored };
  }

  /** Stores a token until its use ends; answers the raw value stored. */
  async set(clientId: string, cached: CachedToken, nowMs: number): Promise<string> {
    const stored = this.box.seal(JSON.stringify(cached), clientId);
    const ttlMs = Math.max(1, cached.useUntilMs - nowMs);
    await this.redis.set(this.keys.receiverToken(clientId), stored, 'PX', ttlMs);
    return stored;
  }

  /** Forgets the token read as `stored`, unless another has replaced it since. */
  async forget(clientId: string, stored: string): Promise<void> {
    await this.forgetScript([this.keys.receiverToken(clientId)], stored);
  }
}
