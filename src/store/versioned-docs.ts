import type { z } from 'zod';
import { slotGroups, type Redis } from './redis.js';
import { defineScript, type ScriptArg, type ScriptCall } from './scripts.js';

// Writes each document only when its stored version is not newer, so a late, older event never
// overwrites state. KEYS[1] routes the call (on a Redis Cluster a call holds documents of one slot);
// ARGV: per document its key, version, JSON and TTL (0: kept). Returns 1 (written) or 0 (stale) each.
const PUT_IF_NEWER_LUA = `
local out = {}
for a = 1, #ARGV, 4 do
  local key, version = ARGV[a], ARGV[a + 1]
  local stored = redis.call('HGET', key, 'v')
  if stored and tonumber(stored) > tonumber(version) then
    out[#out + 1] = 0
  else
    redis.call('HSET', key, 'v', version, 'doc', ARGV[a + 2])
    if tonumber(ARGV[a + 3]) > 0 then redis.call('PEXPIRE', key, ARGV[a + 3]) else redis.call('PERSIST', key) end
    out[#out + 1] = 1
  end
end
return out`;

/** Documents written by one script call at most: bounds the time Redis spends in one call. */
const DOCS_PER_CALL_MAX = 250;

/** Read side of a document store: what the lookup routes need. */
export interface DocLookup<T> {
  get(id: string): Promise<T | undefined>;
}

/** Write side: what ingest needs. `versionMs` is the event time. */
export interface DocWriter<T> {
  put(doc: T, versionMs: number): Promise<'applied' | 'stale'>;
  /** Writes many in order (one script per slot and DOCS_PER_CALL_MAX documents); one result each. */
  putMany(entries: readonly { doc: T; versionMs: number }[]): Promise<('applied' | 'stale')[]>;
}

export interface VersionedDocOptions<S extends z.ZodType> {
  schema: S;
  key: (id: string) => string;
  idOf: (doc: z.output<S>) => string;
  /** Documents in a final state expire after this long; others are kept. */
  isFinal: (doc: z.output<S>) => boolean;
  finalRetentionMs: number;
}

/**
 * One Redis hash per document (`v` = version, `doc` = JSON): tasks and agent statuses. Each
 * document is its own hash tag, so documents spread over a cluster's shards; a batch of writes is one
 * script call on a single server, one per document's slot on a cluster.
 */
export class RedisVersionedDocStore<S extends z.ZodType> implements DocLookup<z.output<S>>, DocWriter<z.output<S>> {
  /** Per document, 1 when written, 0 when the stored version is newer. */
  private readonly putIfNewerScript: ScriptCall<[routing: string], ScriptArg[], number[]>;

  constructor(
    private readonly redis: Redis,
    private readonly options: VersionedDocOptions<S>,
  ) {
    this.putIfNewerScript = defineScript(redis, { name: 'hooklinePutManyIfNewer', keys: 1, lua: PUT_IF_NEWER_LUA });
  }

  async get(id: string): Promise<z.output<S> | undefined> {
    const raw = await this.redis.hget(this.options.key(id), 'doc');
    return raw === null ? undefined : this.options.schema.parse(JSON.parse(raw));
  }

  async put(doc: z.output<S>, versionMs: number): Promise<'applied' | 'stale'> {
    const [result] = await this.putMany([{ doc, versionMs }]);
    return result!;
  }

  async putMany(entries: readonly { doc: z.output<S>; versionMs: number }[]): Promise<('applied' | 'stale')[]> {
    const results = new Array<'applied' | 'stale'>(entries.length);
    const writes = entries.map(({ doc, versionMs }, index) => ({
      index,
      key: this.options.key(this.options.idOf(doc)),
      doc,
      versionMs,
    }));
    await Promise.all(
      slotGroups(this.redis, writes, (write) => write.key, DOCS_PER_CALL_MAX).map((group) => {
        const argv = group.flatMap(({ key, doc, versionMs }) => [
          key,
          versionMs,
          JSON.stringify(doc),
          this.options.isFinal(doc) ? this.options.finalRetentionMs : 0,
        ]);
        return this.putIfNewerScript([group[0]!.key], ...argv).then((replies) =>
          group.forEach(({ index }, i) => (results[index] = replies[i] === 1 ? 'applied' : 'stale')),
        );
      }),
    );
    return results;
  }
}
