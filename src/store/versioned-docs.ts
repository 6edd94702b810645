import type { z } from 'zod';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

// Writes only when the stored version is not newer, so a late, older event never overwrites state.
const PUT_IF_NEWER_LUA = `
local stored = redis.call('HGET', KEYS[1], 'v')
if stored and tonumber(stored) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'doc', ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) else redis.call('PERSIST', KEYS[1]) end
return 1`;

/** Read side of a document store: what the lookup routes need. */
export interface DocLookup<T> {
  get(id: string): Promise<T | undefined>;
}

/** Write side: what ingest needs. `versionMs` is the event time. */
export interface DocWriter<T> {
  put(doc: T, versionMs: number): Promise<'applied' | 'stale'>;
}

export interface VersionedDocOptions<S extends z.ZodType> {
  schema: S;
  key: (id: string) => string;
  idOf: (doc: z.output<S>) => string;
  /** Documents in a final state expire after this long; others are kept. */
  isFinal: (doc: z.output<S>) => boolean;
  finalRetentionMs: number;
}

/** One Redis hash per document (`v` = version, `doc` = JSON): tasks and agent statuses. */
export class RedisVersionedDocStore<S extends z.ZodType> implements DocLookup<z.output<S>>, DocWriter<z.output<S>> {
  /** 1 when written, 0 when the stored version is newer. */
  private readonly putIfNewerScript: ScriptCall<[key: string], [versionMs: number, doc: string, ttlMs: number], number>;

  constructor(
    private readonly redis: Redis,
    private readonly options: VersionedDocOptions<S>,
  ) {
    this.putIfNewerScript = defineScript(redis, { name: 'hooklinePutIfNewer', keys: 1, lua: PUT_IF_NEWER_LUA });
  }

  async get(id: string): Promise<z.output<S> | undefined> {
    const raw = await this.redis.hget(this.options.key(id), 'doc');
    return raw === null ? undefined : this.options.schema.parse(JSON.parse(raw));
  }

  async put(doc: z.output<S>, versionMs: number): Promise<'applied' | 'stale'> {
    const ttlMs = this.options.isFinal(doc) ? this.options.finalRetentionMs : 0;
    const applied = await this.putIfNewerScript([this.options.key(this.options.idOf(doc))], versionMs, JSON.stringify(doc), ttlMs);
    return applied === 1 ? 'applied' : 'stale';
  }
}
