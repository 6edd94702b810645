import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { AgentStatus } from '../domain/agent.js';
import { wakeableSleep } from '../lib/timer-race.js';
import { latestPerEntity, type ReadModelChange } from '../domain/read-model-change.js';
import type { Task } from '../domain/task.js';
import type { Logger } from '../logger.js';
import type { MachineChange, MachineWriter } from '../store/machines.js';
import { decodeEntry, READ_MODEL_GROUP } from '../store/read-model-feed.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import {
  backoffMs,
  BlockingStreamReader,
  claimStaleRounds,
  ensureGroup,
  leaveGroupIfIdle,
  pruneIdleConsumers,
  type StreamEntry,
} from '../store/stream-reads.js';
import type { DocWriter } from '../store/versioned-docs.js';

/**
 * Projects the read models (machines, agent statuses, tasks) from the projection stream that
 * ingest appends to, off ingest's path: an ingest call appends its batch's changes with one XADD
 * and is done; the lookups see them once a projector has applied them.
 *
 * Why it is safe to run anywhere, any number of times at once:
 * 1. Every write is versioned by event time (an older change is refused, an equal one written
 *    again), so applying a change twice, or two entries in either order, leaves the same state;
 *    several processes read the stream through one consumer group, and a second engine on the same
 *    data joins the same group.
 * 2. An entry is acknowledged and deleted (one transaction) only after its changes were applied. A
 *    failed batch stays pending with this consumer and is read again after a back-off; a process
 *    that dies leaves its entries pending, and another claims them once idle for `claimMinIdleMs`.
 *    So a restart resumes where the group stopped, and nothing is lost.
 * 3. The entries read at once are cut down to the newest change of each entity before they are
 *    applied (see domain/read-model-change.ts for why that changes nothing), in one script call
 *    per batch and slot.
 * 4. A malformed change is left out with a log line (and counted); the rest of its entry and of
 *    the batch is applied, and the entry is deleted like any other.
 * Deleting projected entries is the stream's trimming: Redis frees a node of the stream once every
 * entry in it is deleted, so once projected the stream holds none of the documents.
 */

/** What one projected batch did, for metrics. */
export interface ProjectionSummary {
  entries: number;
  /** Changes read, and applied after coalescing (fewer when entities repeat). */
  changesRead: number;
  changesApplied: number;
  /** Entries holding a change that could not be read (each logged). */
  entriesSkipped: number;
  /** Per entry: from its append (its id's time, Redis's clock) to its changes being visible (ms). */
  delaysMs: number[];
}

export interface ReadModelProjectorOptions {
  /** Commands (XACK, XDEL, XAUTOCLAIM); a duplicate of it is opened for the blocking reads. */
  redis: Redis;
  /** The projection stream (`keys.readModels.projection`). */
  stream: string;
  machines: MachineWriter;
  agents: DocWriter<AgentStatus>;
  tasks: DocWriter<Task>;
  logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Told about the reader's own connection, so its outages are logged with the process's others. */
  watchConnection?: (connection: Redis) => void;
  /** Told of each projected batch (metrics). */
  observe?: (summary: ProjectionSummary) => void;
  /** This consumer's name in the group; default host, pid and a random suffix. */
  consumer?: string;
  /** Entries per read (each one ingest batch); default 100. */
  batchSize?: number;
  /** How long one read waits for new entries; default 2 s. */
  blockMs?: number;
  /** Entries pending this long belong to a consumer presumed dead and are claimed; default 30 s. */
  claimMinIdleMs?: number;
  /** How often stale entries are claimed and idle consumers pruned; default 10 s. */
  maintenanceIntervalMs?: number;
  /** Back-off after a failed batch; defaults 200 ms doubling to 10 s. */
  retryBaseMs?: number;
  retryMaxMs?: number;
  nowMs?: () => number;
}

/** Other consumers with nothing pending and silent this long are removed from the group. */
const CONSUMER_IDLE_MAX_MS = 24 * 3_600_000;
const CONSUMERS_PRUNED_MAX = 100;

/** The stream consumer that keeps the read models (see the comment above). */
export class ReadModelProjector {
  private readonly consumer: string;
  private readonly batchSize: number;
  private readonly blockMs: number;
  private readonly claimMinIdleMs: number;
  private readonly maintenanceIntervalMs: number;
  private readonly nowMs: () => number;
  private reader: BlockingStreamReader | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private wake: (() => void) | undefined;

  constructor(private readonly options: ReadModelProjectorOptions) {
    this.consumer = options.consumer ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
    this.batchSize = options.batchSize ?? 100;
    this.blockMs = options.blockMs ?? 2_000;
    this.claimMinIdleMs = options.claimMinIdleMs ?? 30_000;
    this.maintenanceIntervalMs = options.maintenanceIntervalMs ?? 10_000;
    this.nowMs = options.nowMs ?? Date.now;
  }

  get consumerName(): string {
    return this.consumer;
  }

  /** Creates the group (and the stream) when missing, then projects in the background until stop(). */
  async start(): Promise<void> {
    if (this.loop || this.stopping) throw new Error('a read-model projector can be started once');
    await ensureGroup(this.options.redis, this.options.stream, READ_MODEL_GROUP);
    // stop() came while the group was being made: nothing to read for.
    if (this.stopping) return;
    this.reader = new BlockingStreamReader(
      this.options.redis,
      this.options.stream,
      'read-models',
      this.options.watchConnection,
    );
    this.loop = this.run(this.reader);
  }

  /**
   * Stops: a batch being applied is finished first; a blocked read is ended (CLIENT UNBLOCK) and
   * entries it took are projected too. Entries left pending are claimed by another projector.
   */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.wake?.();
    if (!this.loop || !this.reader) return;
    await this.reader.close(this.loop, this.blockMs);
    // With Redis unreachable there is no group to leave now: shutdown does not wait on it.
    if (this.options.redis.status !== 'ready') return;
    await leaveGroupIfIdle(this.options.redis, this.options.stream, READ_MODEL_GROUP, this.consumer).catch(
      (error: Error) => this.options.logger.warn({ err: error }, 'read models: could not leave the consumer group'),
    );
  }

  private async run(reader: BlockingStreamReader): Promise<void> {
    let failures = 0;
    // This consumer's own pending entries first (a restart under the same name, or a failed batch).
    let ownPendingFirst = true;
    let maintenanceDueAtMs = 0;
    while (!this.stopping) {
      try {
        if (this.nowMs() >= maintenanceDueAtMs) {
          maintenanceDueAtMs = this.nowMs() + this.maintenanceIntervalMs;
          await this.maintain();
        }
        let entries = await this.read(reader, ownPendingFirst ? '0' : '>');
        if (ownPendingFirst && entries.length > 0 && entries.length < this.batchSize)
          entries = [...entries, ...(await this.read(reader, '>', this.batchSize - entries.length))];
        if (entries.length > 0) await this.project(entries);
        else ownPendingFirst = false;
        failures = 0;
      } catch (error) {
        if (this.stopping) break;
        failures += 1;
        ownPendingFirst = true;
        reader.forget();
        if (/NOGROUP/.test((error as Error).message))
          await ensureGroup(this.options.redis, this.options.stream, READ_MODEL_GROUP).catch(() => undefined);
        const delayMs = backoffMs(failures, this.options.retryBaseMs ?? 200, this.options.retryMaxMs ?? 10_000);
        if (!isRedisUnavailable(error as Error))
          this.options.logger.error(
            { err: error, failures, retryInMs: delayMs },
            'read models: projecting a batch failed; its entries stay pending and are retried',
          );
        await this.pause(delayMs);
      }
    }
  }

  /** One XREADGROUP; without `count` a read of new entries blocks up to blockMs. */
  private read(reader: BlockingStreamReader, from: '>' | '0', count?: number): Promise<StreamEntry[]> {
    return reader.read(
      {
        group: READ_MODEL_GROUP,
        consumer: this.consumer,
        from,
        count: count ?? this.batchSize,
        ...(count === undefined ? { blockMs: this.blockMs } : {}),
      },
      () => this.stopping,
    );
  }

  /**
   * Applies the entries' changes, newest per entity, then acknowledges and deletes the entries in
   * one transaction. Throws (the entries stay pending) when applying fails.
   */
  private async project(entries: readonly StreamEntry[]): Promise<void> {
    // 1. Read every entry; a change that cannot be read is left out with a log line.
    const read: ReadModelChange[] = [];
    let entriesSkipped = 0;
    for (const [entryId, fields] of entries) {
      const { changes, problems } = decodeEntry(fields);
      read.push(...changes);
      if (problems.length === 0) continue;
      entriesSkipped += 1;
      this.options.logger.warn(
        { entryId, problems, changesKept: changes.length, stream: this.options.stream },
        'read models: projection entry skipped in part or whole (malformed)',
      );
    }
    // 2. The newest change of each entity, 3. applied: one script call per read model and slot.
    const latest = latestPerEntity(read);
    await this.apply(latest);
    // 4. Done with: acknowledged and deleted together, so no entry is deleted unapplied.
    const ids = entries.map(([entryId]) => entryId);
    const { redis, stream } = this.options;
    const results = await redis
      .multi()
      .xack(stream, READ_MODEL_GROUP, ...ids)
      .xdel(stream, ...ids)
      .exec();
    const failure = results?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
    const visibleAtMs = this.nowMs();
    this.options.observe?.({
      entries: entries.length,
      changesRead: read.length,
      changesApplied: latest.length,
      entriesSkipped,
      delaysMs: ids.map((id) => Math.max(0, visibleAtMs - Number(id.slice(0, id.indexOf('-'))))),
    });
  }

  private async apply(changes: readonly ReadModelChange[]): Promise<void> {
    const machines: MachineChange[] = [];
    const agents: { doc: AgentStatus; versionMs: number }[] = [];
    const tasks: { doc: Task; versionMs: number }[] = [];
    for (const change of changes) {
      if (change.model === 'machine') {
        const { model: _model, ...machineChange } = change;
        machines.push(machineChange);
      } else if (change.model === 'agent') agents.push({ doc: change.doc, versionMs: change.versionMs });
      else tasks.push({ doc: change.doc, versionMs: change.versionMs });
    }
    await Promise.all([
      machines.length > 0 ? this.options.machines.apply(machines) : undefined,
      agents.length > 0 ? this.options.agents.putMany(agents) : undefined,
      tasks.length > 0 ? this.options.tasks.putMany(tasks) : undefined,
    ]);
  }

  /** Claims (and projects) the entries of consumers presumed dead, then prunes long-idle consumers. */
  private async maintain(): Promise<void> {
    const { redis, stream } = this.options;
    await claimStaleRounds(
      redis,
      {
        stream,
        group: READ_MODEL_GROUP,
        consumer: this.consumer,
        minIdleMs: this.claimMinIdleMs,
        count: this.batchSize,
      },
      async (entries) => {
        this.options.logger.info(
          { entries: entries.length },
          'read models: claimed stale entries of another projector',
        );
        await this.project(entries);
      },
    );
    try {
      await pruneIdleConsumers(redis, {
        stream,
        group: READ_MODEL_GROUP,
        self: this.consumer,
        idleMaxMs: CONSUMER_IDLE_MAX_MS,
        max: CONSUMERS_PRUNED_MAX,
      });
    } catch (error) {
      if (!isRedisUnavailable(error as Error))
        this.options.logger.warn({ err: error }, 'read models: pruning idle consumers failed; retried later');
    }
  }

  /** Sleeps, unless stop() comes first. */
  private async pause(delayMs: number): Promise<void> {
    if (this.stopping) return;
    await wakeableSleep(delayMs, (wake) => (this.wake = wake));
    this.wake = undefined;
  }
}
