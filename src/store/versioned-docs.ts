import type { z } from 'zod';
import { slotGroups, type Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

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
    this.putIfNewerScript = defineScriptFile(redis, 'versioned-docs-put-if-newer', 1);
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
