import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { ROLES, type Principal, type Role } from '../domain/roles.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

const KEY_PREFIX = 'hk_';

const keyRecordSchema = z.object({
  id: z.string(),
  name: z.string(),
  vendorId: z.string().optional(),
  roles: z.array(z.enum(ROLES)),
  createdAt: z.string(),
});

export type ApiKeyRecord = z.infer<typeof keyRecordSchema>;

/** What the auth hook needs: resolve a presented key to a principal, or nothing. */
export interface ApiKeyLookup {
  authenticate(presentedKey: string): Promise<Principal | undefined>;
}

/** The SHA-256 of a presented key: what Redis stores, and what rate limits count by. */
export function keyFingerprint(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/**
 * API keys, stored only as SHA-256 hashes (keys are 256-bit random, so a fast hash suffices).
 * All keys live under one hash tag, so create and revoke are single atomic transactions.
 */
export class RedisApiKeyStore implements ApiKeyLookup {
  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Creates a key; the plaintext is returned once and never stored. */
  async create(input: {
    name: string;
    vendorId?: string;
    roles: readonly Role[];
  }): Promise<{ key: string; record: ApiKeyRecord }> {
    const key = KEY_PREFIX + randomBytes(32).toString('base64url');
    const record: ApiKeyRecord = {
      id: `key_${randomBytes(8).toString('hex')}`,
      name: input.name,
      ...(input.vendorId === undefined ? {} : { vendorId: input.vendorId }),
      roles: [...new Set(input.roles)],
      createdAt: this.now().toISOString(),
    };
    const hash = keyFingerprint(key);
    await this.redis
      .multi()
      .hset(this.keys.apiKeys.byHash, hash, JSON.stringify(record))
      .hset(this.keys.apiKeys.hashById, record.id, hash)
      .exec();
    return { key, record };
  }

  async list(): Promise<ApiKeyRecord[]> {
    const rows = await this.redis.hvals(this.keys.apiKeys.byHash);
    return rows
      .map((row) => keyRecordSchema.parse(JSON.parse(row)))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** Revokes by key id; resolves with the revoked key's record, or undefined when no such key exists. */
  async revoke(id: string): Promise<ApiKeyRecord | undefined> {
    const hash = await this.redis.hget(this.keys.apiKeys.hashById, id);
    if (hash === null) return undefined;
    const row = await this.redis.hget(this.keys.apiKeys.byHash, hash);
    await this.redis.multi().hdel(this.keys.apiKeys.byHash, hash).hdel(this.keys.apiKeys.hashById, id).exec();
    return row === null ? undefined : keyRecordSchema.parse(JSON.parse(row));
  }

  async authenticate(presentedKey: string): Promise<Principal | undefined> {
    if (!presentedKey.startsWith(KEY_PREFIX) || presentedKey.length > 128) return undefined;
    const row = await this.redis.hget(this.keys.apiKeys.byHash, keyFingerprint(presentedKey));
    if (row === null) return undefined;
    const record = keyRecordSchema.parse(JSON.parse(row));
    return { keyId: record.id, name: record.name, roles: record.roles, vendorId: record.vendorId };
  }
}
