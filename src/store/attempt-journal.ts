import { randomBytes } from 'node:crypto';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { projectionBacklog } from './read-model-feed.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/** One concluded attempt as the journal carries it to its projection. */
export interface JournalRow {
  webhookId: string;
  deliveryId: string;
  acceptedAtMs: number;
  atMs: number;
  /** What the projection writes for it (the delivery log's compact value). */
  value: string;
}

export interface AttemptJournalOptions {
  /** How many journal streams there are (the queue partitions' count); every process reads them all. */
  shards: number;
  /** How often each process looks for entries to project (ms). */
  everyMs: number;
  /** How long a process holds a shard once it took it (renewed while it projects), ms. */
  leaseMs: number;
  /** Writes one read's rows where the reads find them; must be idempotent (an entry may be projected twice after a crash). */
  project: (rows: JournalRow[]) => Promise<void>;
  /** Told when a pass failed (it is tried again on the next tick). */
  onError?: (error: Error) => void;
  /** Which shard this process appends to; default one at random (processes spread over them). */
  shard?: number;
}

/** Entries one read of a shard takes at most: one projection call's worth. */
const ENTRIES_PER_READ = 100;
/** Reads of one shard a pass makes at most before it yields to the next tick. */
const READS_PER_PASS_MAX = 50;

type Entry = [id: string, fields: string[]];

/**
 * The delivery log's journal of concluded attempts: a worker appends each batch of them as one
 * stream entry (one command, no per-delivery key), and a projection, run by every worker process
 * for whichever shard it holds the lease of, writes them into the delivery log's per-webhook shape
 * off the hot path, then deletes the entries. An entry is deleted only once projected, so a process
 * that dies mid-projection leaves it for the next holder of the shard (the projection is idempotent).
 * What waits in the journal is what the delivery log does not show yet: its age is the projection lag.
 */
export class RedisAttemptJournal {
  private readonly leaseAndRead: ScriptCall<[journal: string, lease: string], [string, number, number], Entry[] | null>;
  private readonly release: ScriptCall<[lease: string], [string], number>;
  private readonly token = randomBytes(8).toString('hex');
  private readonly shard: number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
    private readonly options: AttemptJournalOptions,
  ) {
    this.leaseAndRead = defineScriptFile(redis, 'attempt-journal-lease-and-read', 2);
    this.release = defineScriptFile(redis, 'attempt-journal-release', 1);
    this.shard = options.shard ?? Math.floor(Math.random() * options.shards);
  }

  /** Appends concluded attempts as one entry of this process's shard (one command). */
  async append(rows: readonly JournalRow[]): Promise<void> {
    if (rows.length === 0) return;
    const args: string[] = [];
    for (const row of rows)
      args.push(`${row.webhookId}\t${row.deliveryId}\t${row.acceptedAtMs}\t${row.atMs}`, row.value);
    await this.redis.xadd(this.keys.deliveries.journal(this.shard), '*', ...args);
  }

  /** Projects every `everyMs` until stopped. */
  start(): void {
    this.stopped = false;
    const tick = () => {
      this.running = this.drain()
        .then(
          () => undefined,
          (error: unknown) => this.options.onError?.(error instanceof Error ? error : new Error(String(error))),
        )
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.timer = setTimeout(tick, this.options.everyMs);
        });
    };
    this.timer = setTimeout(tick, this.options.everyMs);
  }

  /**
   * One pass: each shard whose lease this process holds or takes is read and projected until it is
   * empty (bounded per pass), then its entries deleted. Resolves to how many attempts it projected.
   */
  async drain(): Promise<number> {
    let projected = 0;
    for (let shard = 0; shard < this.options.shards; shard += 1) {
      const journal = this.keys.deliveries.journal(shard);
      const lease = this.keys.deliveries.journalLease(shard);
      for (let reads = 0; reads < READS_PER_PASS_MAX; reads += 1) {
        const entries = await this.leaseAndRead([journal, lease], this.token, this.options.leaseMs, ENTRIES_PER_READ);
        if (!entries || entries.length === 0) break;
        const rows = entries.flatMap(([, fields]) => rowsOf(fields));
        await this.options.project(rows);
        await this.redis.xdel(journal, ...entries.map(([id]) => id));
        projected += rows.length;
        if (entries.length < ENTRIES_PER_READ) break;
      }
    }
    return projected;
  }

  /** Attempts waiting to be projected, and how old the oldest is (ms; 0 when none wait). */
  async backlog(nowMs: number): Promise<{ entries: number; oldestAgeMs: number }> {
    const shards = await Promise.all(
      Array.from({ length: this.options.shards }, (_, shard) =>
        projectionBacklog(this.redis, this.keys.deliveries.journal(shard), nowMs),
      ),
    );
    return {
      entries: shards.reduce((sum, shard) => sum + shard.entries, 0),
      oldestAgeMs: Math.max(0, ...shards.map((shard) => shard.oldestAgeMs)),
    };
  }

  /**
   * Stops the ticks, projects what is left (this process's last attempts), and lets go of its
   * leases. With Redis unreachable it only stops: the entries wait in Redis, and the shards' leases
   * end by themselves, so another worker projects them.
   */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.redis.status !== 'ready') return;
    await this.running;
    try {
      await this.drain();
    } finally {
      await Promise.all(
        Array.from({ length: this.options.shards }, (_, shard) =>
          this.release([this.keys.deliveries.journalLease(shard)], this.token).catch(() => 0),
        ),
      );
    }
  }
}

/** The rows of one journal entry (a field `<webhook>\t<delivery>\t<accepted ms>\t<at ms>` and the value, per attempt); malformed ones are skipped. */
function rowsOf(fields: readonly string[]): JournalRow[] {
  const rows: JournalRow[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const [webhookId, deliveryId, acceptedAtMs, atMs] = fields[i]!.split('\t');
    if (webhookId === undefined || deliveryId === undefined || atMs === undefined) continue;
    rows.push({ webhookId, deliveryId, acceptedAtMs: Number(acceptedAtMs), atMs: Number(atMs), value: fields[i + 1]! });
  }
  return rows;
}
