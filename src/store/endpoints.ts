import { createHash } from 'node:crypto';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** What the delivery processors need to share, across workers and restarts, about receiver endpoints. */
export interface EndpointMemory {
  /** Did any worker get an answer from `endpoint` lately? */
  answeredLately(endpoint: string): Promise<boolean>;
  /** This worker got an answer from `endpoint`. */
  rememberAnswered(endpoint: string, nowMs: number): Promise<void>;
}

/** How long an endpoint counts as known after a worker last wrote that it answered. */
const ENDPOINT_MEMORY_TTL_MS = 7 * 24 * 3_600_000;

/**
 * One small key per endpoint (the digest of its key: one vendor's origin), so every worker, and a
 * worker after a restart, knows which receivers have answered before: their first attempt in a
 * process is then no "first contact" that a burst must wait behind. Each worker reads an endpoint
 * once and writes it once (when it first sees the endpoint answer without having learnt it here),
 * so the cost is per endpoint and process, never per delivery.
 */
export class RedisEndpointMemory implements EndpointMemory {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'endpointAnswered'>,
    private readonly ttlMs = ENDPOINT_MEMORY_TTL_MS,
  ) {}

  async answeredLately(endpoint: string): Promise<boolean> {
    return (await this.redis.exists(this.keyOf(endpoint))) > 0;
  }

  async rememberAnswered(endpoint: string, nowMs: number): Promise<void> {
    await this.redis.set(this.keyOf(endpoint), String(nowMs), 'PX', this.ttlMs);
  }

  private keyOf(endpoint: string): string {
    return this.keys.endpointAnswered(endpointDigest(endpoint));
  }
}

/** An endpoint's name in Redis keys: a digest of its key (domain/endpoint.ts; fixed length, no URL characters). */
export function endpointDigest(endpoint: string): string {
  return createHash('sha256').update(endpoint).digest('hex').slice(0, 32);
}
