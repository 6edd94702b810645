import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { DeliverJob } from '../domain/delivery.js';
import { wakeableSleep } from '../lib/timer-race.js';
import type { Logger } from '../logger.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import { defineScriptFile, type ScriptCall } from '../store/scripts.js';
import {
  backoffMs,
  BlockingStreamReader,
  claimStale,
  ensureGroup,
  leaveGroupIfIdle,
  pruneIdleConsumers,
  type StreamEntry,
} from '../store/stream-reads.js';
import { BATCH_MAX, JOBS } from './jobs.js';
import { StorageUnavailableError } from './signals.js';

/**
 * Ingest's first attempts travel through one Redis stream per queue partition, not BullMQ: an entry
 * is one batch (as a batch job was), appended with one XADD, read by the workers through a consumer
 * group and deleted once its batch has run. A job's lifecycle (its hash, the wait list, the lock,
 * moving it to active and to completed: several script calls and a dozen commands per batch, and
 * the job's JSON built and parsed around them) is what a stream entry does not cost; everything
 * after the first attempt (retries, deferrals, parks, replays) stays in BullMQ, where delays and
 * promotions are.
 */

/** The workers' consumer group on every first-attempt stream. */
export const FIRST_ATTEMPTS_GROUP = 'hookline-deliveries';
/**
 * An entry's fields, per delivery in batch order: `d`, the delivery without its body as JSON, then
 * `p`, the body as it will be sent. The body travels as a field of its own rather than escaped
 * inside the batch's JSON: no escaping at ingest, no unescaping and no second copy at the worker,
 * and fewer bytes in Redis while it waits. A delivery whose body ingest wrote to its webhook's
 * event log is `l` instead, the delivery without a body: the reader takes the body from the log
 * (one script call per batch), so a body goes to Redis once, not twice.
 */
const DELIVERY_FIELD = 'd';
const BODY_FIELD = 'p';
const LOGGED_FIELD = 'l';

/**
 * Appends a batch of first attempts to a partition's stream: one XADD. `bodiesLogged`: the event
 * log holds every body of the batch already (its write has completed), so the entry refers to it.
 */
export function appendBatch(
  redis: Redis,
  stream: string,
  deliveries: readonly DeliverJob[],
  bodiesLogged = false,
): Promise<unknown> {
  const fields: string[] = [];
  for (const { body, ...delivery } of deliveries)
    if (bodiesLogged) fields.push(LOGGED_FIELD, JSON.stringify(delivery));
    else fields.push(DELIVERY_FIELD, JSON.stringify(delivery), BODY_FIELD, body);
  return redis.xadd(stream, '*', ...fields);
}

/**
 * Batches of a partition's stream by state: `waiting` (appended, not yet read) and `active` (read by
 * a worker, not yet finished). A missing group (no worker ever ran) leaves every entry waiting; any
 * other failure is the caller's.
 */
export async function streamCounts(redis: Redis, stream: string): Promise<{ waiting: number; active: number }> {
  const [length, pending] = await Promise.all([
    redis.xlen(stream),
    (redis.xpending(stream, FIRST_ATTEMPTS_GROUP) as Promise<[number, ...unknown[]]>).then(
      ([count]) => Number(count),
      (error: Error) => {
        if (/NOGROUP/.test(error.message)) return 0;
        throw error;
      },
    ),
  ]);
  return { waiting: Math.max(0, length - pending), active: pending };
}

/** A batch of first attempts as the batch runner takes it. */
export interface FirstAttemptBatch {
  /** Stable across re-runs of the same entry: parks made by a run are named after it. */
  id: string;
  deliveries: DeliverJob[];
  /** Run before (this worker failed it, or another died with it): what is finished is skipped. */
  rerun: boolean;
  /**
   * A first-attempt stream entry's first run: its deliveries have no record and no job of their
   * own, so a first attempt delivered may go to the delivery log's journal (AttemptWrite.journal).
   */
  journal?: boolean;
  /**
   * Deliveries of `deliveries` whose entry referred to the event log for a body the log no longer
   * holds (the event was erased, or the installation's retention passed before the first attempt):
   * nothing can be sent, so they are dropped (their body is empty here).
   */
  gone?: ReadonlySet<DeliverJob>;
}

export interface FirstAttemptReaderOptions {
  /** Commands (XACK, XDEL, XCLAIM, XAUTOCLAIM); a duplicate of it is opened for the blocking reads. */
  redis: Redis;
  partition: number;
  stream: string;
  /** Where entries without a readable batch are kept with their reason (capped). */
  failedStream: string;
  /** Runs one batch; resolves once every delivery in it has an outcome or has left for a job of its own. */
  run: (batch: FirstAttemptBatch) => Promise<unknown>;
  /** The bodies of deliveries whose entry refers to the event log, in input order (undefined: none is kept). */
  loggedBodies: (refs: readonly { webhookId: string; deliveryId: string }[]) => Promise<(string | undefined)[]>;
  /**
   * Full batches (BATCH_MAX deliveries) this reader runs at once: it reads on while the deliveries
   * it runs are fewer than this many full batches hold, up to SMALL_BATCHES_FACTOR times as many
   * batches, so small batches (a trickle of events) do not each take a whole batch's place.
   */
  inFlightMax: number;
  /** A batch pending this long with a consumer that stopped renewing it is claimed (a dead worker's). */
  claimMinIdleMs: number;
  logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Told about the reader's own connection, so its outages are logged with the process's others. */
  watchConnection?: (connection: Redis) => void;
  /** This consumer's name; default host, pid and a random suffix. */
  consumer?: string;
  /** How long one read waits for new entries; default 2 s. */
  blockMs?: number;
  /** Back-off of a failed batch or read; defaults 200 ms doubling to 10 s. */
  retryBaseMs?: number;
  retryMaxMs?: number;
  nowMs?: () => number;
}

/** Entries kept in a failed stream, about (XADD MAXLEN ~). */
const FAILED_MAX = 10_000;
/** Claim rounds per maintenance pass. */
const CLAIM_ROUNDS_MAX = 10;
/** Consumers silent this long with nothing pending are removed from the group. */
const CONSUMER_IDLE_MAX_MS = 24 * 3_600_000;
const CONSUMERS_PRUNED_MAX = 100;
/** Idle consumers, and set-aside entries this version can read, are looked for every this many maintenance passes. */
const PRUNE_EVERY = 20;
/**
 * Batches at once, as a multiple of inFlightMax, when they are small. Each batch waits at least a
 * round trip for its bodies and the end of its slowest delivery; measured at 800 events a second
 * in batches of about 8, two at once per partition fell behind (accepted → received p50 94–700 ms),
 * eight kept up (9–20 ms).
 */
const SMALL_BATCHES_FACTOR = 4;
/** Set-aside entries looked at per such pass at most. */
const REDRIVE_LOOKS_MAX = 100;

/**
 * Reads one partition's first-attempt stream through the workers' consumer group and runs each
 * entry's batch, about `inFlightMax` full batches at once (see room), so many worker processes share a partition. An entry
 * is acknowledged and deleted (one transaction) only after its batch ran to the end. A batch that
 * failed (storage went away, an unexpected error) stays pending and runs again here after a
 * back-off as a re-run, which skips what is finished. While a batch runs its entry is claimed
 * afresh three times per `claimMinIdleMs`; if this process dies, another claims the entry (XAUTOCLAIM)
 * once it has been idle that long, and re-runs it. An entry without a readable batch is moved to
 * the failed stream with its reason and acknowledged, so it cannot wedge the partition.
 */
export class FirstAttemptReader {
  private readonly consumer: string;
  private readonly blockMs: number;
  private readonly maintenanceIntervalMs: number;
  private readonly nowMs: () => number;
  /** Batches running (or waiting to run again), by entry id. */
  private readonly running = new Map<string, Promise<void>>();
  private reader: BlockingStreamReader | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  /** Wakes the read loop (a batch finished, or stop()). */
  private wake: () => void = () => undefined;
  /** Wakes every re-run waiting out its back-off (stop()). */
  private readonly sleepers = new Set<() => void>();
  /** Deliveries of the batches running (see room). */
  private runningDeliveries = 0;
  /** Where the next look at the failed stream starts (see redrive). */
  private redriveCursor = '-';
  private readonly redriveScript: ScriptCall<[failed: string, stream: string], [id: string], number>;

  constructor(private readonly options: FirstAttemptReaderOptions) {
    this.consumer = options.consumer ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
    this.blockMs = options.blockMs ?? 2_000;
    // Three renewals per claim time: one delayed by a busy event loop still comes in time.
    this.maintenanceIntervalMs = Math.max(50, Math.floor(options.claimMinIdleMs / 3));
    this.nowMs = options.nowMs ?? Date.now;
    this.redriveScript = defineScriptFile(options.redis, 'first-attempts-redrive', 2);
  }

  get consumerName(): string {
    return this.consumer;
  }

  /** Creates the group when missing, then reads in the background until stop(). */
  async start(): Promise<void> {
    if (this.loop || this.stopping) throw new Error('a first-attempt reader can be started once');
    await ensureGroup(this.options.redis, this.options.stream, FIRST_ATTEMPTS_GROUP);
    const reader = new BlockingStreamReader(
      this.options.redis,
      this.options.stream,
      `first-${this.options.partition}`,
      this.options.watchConnection,
    );
    this.reader = reader;
    this.loop = this.run(reader);
  }

  /**
   * Stops reading (a blocked read is ended with CLIENT UNBLOCK) and waits for the batches running;
   * a batch waiting to run again is left pending, for the next worker to claim.
   */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.wake();
    for (const wake of this.sleepers) wake();
    if (!this.loop || !this.reader) return;
    await this.reader.close(this.loop, this.blockMs);
    await Promise.all(this.running.values());
    await leaveGroupIfIdle(this.options.redis, this.options.stream, FIRST_ATTEMPTS_GROUP, this.consumer).catch(
      () => undefined,
    );
  }

  private async run(reader: BlockingStreamReader): Promise<void> {
    const { stream } = this.options;
    let failures = 0;
    let passes = 0;
    let maintenanceDueAtMs = 0;
    while (!this.stopping) {
      try {
        if (this.nowMs() >= maintenanceDueAtMs) {
          maintenanceDueAtMs = this.nowMs() + this.maintenanceIntervalMs;
          await this.maintain(passes++ % PRUNE_EVERY === 0);
        }
        const room = this.room();
        const untilMaintenanceMs = Math.max(1, maintenanceDueAtMs - this.nowMs());
        if (room <= 0) {
          await wakeableSleep(untilMaintenanceMs, (wake) => (this.wake = wake));
          continue;
        }
        const entries = await reader.read(
          {
            group: FIRST_ATTEMPTS_GROUP,
            consumer: this.consumer,
            from: '>',
            count: room,
            blockMs: Math.min(this.blockMs, untilMaintenanceMs),
          },
          () => this.stopping,
        );
        for (const entry of entries) this.launch(entry, false);
        failures = 0;
      } catch (error) {
        if (this.stopping) break;
        failures += 1;
        reader.forget();
        if (/NOGROUP/.test((error as Error).message))
          await ensureGroup(this.options.redis, stream, FIRST_ATTEMPTS_GROUP).catch(() => undefined);
        if (!isRedisUnavailable(error as Error))
          this.options.logger.error({ err: error, partition: this.options.partition }, 'first attempts: read failed');
        await this.sleep(this.backoffMs(failures));
      }
    }
  }

  /**
   * Entries to read now: as many full batches as the deliveries running leave room for (at least
   * one while there is any), within SMALL_BATCHES_FACTOR × inFlightMax batches.
   */
  private room(): number {
    const { inFlightMax } = this.options;
    const deliveriesRoom = inFlightMax * BATCH_MAX - this.runningDeliveries;
    return Math.min(inFlightMax * SMALL_BATCHES_FACTOR - this.running.size, Math.ceil(deliveriesRoom / BATCH_MAX));
  }

  /** Runs an entry's batch until it finishes, again after each failure (as a re-run) until it does or stop(). */
  private launch([entryId, fields]: StreamEntry, rerun: boolean): void {
    if (this.running.has(entryId)) return;
    const batch = fields === null ? undefined : decodeBatch(fields);
    const size = typeof batch === 'object' ? batch.length : 0;
    this.runningDeliveries += size;
    const running = (async () => {
      if (batch === undefined || typeof batch === 'string') {
        await this.setAside(entryId, fields, batch ?? 'the entry was deleted').catch(() => undefined);
        return;
      }
      const id = `s${this.options.partition}-${entryId}`;
      for (let failures = 0; ;) {
        try {
          const first = !rerun && failures === 0;
          const gone = await this.withLoggedBodies(batch);
          await this.options.run({
            id,
            deliveries: batch.map(({ delivery }) => delivery),
            rerun: !first,
            ...(first ? { journal: true } : {}),
            ...(gone.size > 0 ? { gone } : {}),
          });
          await this.finish(entryId);
          return;
        } catch (error) {
          failures += 1;
          if (!(error instanceof StorageUnavailableError) && !isRedisUnavailable(error as Error))
            this.options.logger.warn(
              { err: (error as Error).message, batchId: id, failures },
              'first attempts: batch failed; it runs again',
            );
          if (this.stopping) return;
          await this.sleep(this.backoffMs(failures));
          if (this.stopping) return;
        }
      }
    })().finally(() => {
      this.running.delete(entryId);
      this.runningDeliveries -= size;
      this.wake();
    });
    this.running.set(entryId, running);
  }

  /**
   * Gives the deliveries whose entry refers to the event log their bodies from it (in place, so a
   * re-run asks again only for the ones still missing), and answers those the log no longer holds.
   */
  private async withLoggedBodies(batch: DecodedDelivery[]): Promise<Set<DeliverJob>> {
    const gone = new Set<DeliverJob>();
    const missing = batch.filter((entry) => entry.logged && entry.delivery.body === '');
    if (missing.length === 0) return gone;
    let bodies: (string | undefined)[];
    try {
      bodies = await this.options.loggedBodies(missing.map(({ delivery }) => delivery));
    } catch (error) {
      throw isRedisUnavailable(error as Error) ? new StorageUnavailableError() : error;
    }
    missing.forEach(({ delivery }, i) => {
      const body = bodies[i];
      if (body === undefined) gone.add(delivery);
      else delivery.body = body;
    });
    return gone;
  }

  /** Acknowledges and deletes a finished entry, in one transaction on the stream's slot. */
  private async finish(entryId: string): Promise<void> {
    const { redis, stream } = this.options;
    const results = await redis.multi().xack(stream, FIRST_ATTEMPTS_GROUP, entryId).xdel(stream, entryId).exec();
    const failure = results?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
  }

  /** Keeps an entry that holds no readable batch in the failed stream with its reason, and acknowledges it. */
  private async setAside(entryId: string, fields: Buffer[] | null, reason: string): Promise<void> {
    const { redis, stream, failedStream } = this.options;
    const transaction = redis.multi();
    if (fields !== null)
      transaction.xadd(
        failedStream,
        'MAXLEN',
        '~',
        FAILED_MAX,
        '*',
        'reason',
        reason,
        'failed_at',
        new Date(this.nowMs()).toISOString(),
        'entry_id',
        entryId,
        ...fields,
      );
    const results = await transaction.xack(stream, FIRST_ATTEMPTS_GROUP, entryId).xdel(stream, entryId).exec();
    const failure = results?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
    if (fields !== null)
      this.options.logger.error({ entryId, reason, failedStream }, 'first attempts: entry set aside');
  }

  /**
   * Renews this consumer's claim on the entries it runs (their idle time starts again), then claims
   * the entries of consumers that stopped renewing theirs, as re-runs, as far as there is room.
   */
  private async maintain(prune: boolean): Promise<void> {
    const { redis, stream, claimMinIdleMs } = this.options;
    if (this.running.size > 0)
      await redis.xclaim(stream, FIRST_ATTEMPTS_GROUP, this.consumer, 0, ...this.running.keys(), 'JUSTID');
    let cursor = '0-0';
    for (let round = 0; round < CLAIM_ROUNDS_MAX; round += 1) {
      const room = this.room();
      if (room <= 0) break;
      const { next, entries } = await claimStale(redis, {
        stream,
        group: FIRST_ATTEMPTS_GROUP,
        consumer: this.consumer,
        minIdleMs: claimMinIdleMs,
        cursor,
        count: room,
      });
      if (entries.length > 0)
        this.options.logger.info(
          { entries: entries.length, partition: this.options.partition },
          'first attempts: claimed batches of a worker that stopped',
        );
      for (const entry of entries) this.launch(entry, true);
      cursor = next;
      if (cursor === '0-0') break;
    }
    if (!prune) return;
    await this.redrive().catch(() => undefined);
    await pruneIdleConsumers(redis, {
      stream,
      group: FIRST_ATTEMPTS_GROUP,
      self: this.consumer,
      idleMaxMs: CONSUMER_IDLE_MAX_MS,
      max: CONSUMERS_PRUNED_MAX,
    }).catch(() => undefined);
  }

  /**
   * Puts set-aside entries that this version reads back on the stream, to run as any entry. During a
   * rolling upgrade an older worker sets aside what it cannot read (an entry that refers to the
   * event log for its bodies, `l`); the newer workers run it then, so nothing is stranded. Looks at
   * REDRIVE_LOOKS_MAX entries a pass, going on from where the last pass stopped; an entry this
   * version cannot read either stays where it is, with its reason.
   */
  private async redrive(): Promise<void> {
    const { redis, stream, failedStream, logger, partition } = this.options;
    const entries = (await redis.xrangeBuffer(
      failedStream,
      this.redriveCursor,
      '+',
      'COUNT',
      REDRIVE_LOOKS_MAX,
    )) as unknown as [Buffer, Buffer[]][];
    this.redriveCursor = entries.length < REDRIVE_LOOKS_MAX ? '-' : `(${entries.at(-1)![0].toString()}`;
    for (const [rawId, fields] of entries) {
      const meta = fields.slice(0, 6).map((field) => field.toString());
      if (meta[0] !== 'reason' || meta[2] !== 'failed_at' || meta[4] !== 'entry_id') continue;
      if (typeof decodeBatch(fields.slice(6)) === 'string') continue;
      const id = rawId.toString();
      if (Number(await this.redriveScript([failedStream, stream], id)) === 1)
        logger.info(
          { partition, failedEntryId: id, entryId: meta[5], reason: meta[1] },
          'first attempts: an entry set aside elsewhere is readable here; it runs again',
        );
    }
  }

  private backoffMs(failures: number): number {
    return backoffMs(failures, this.options.retryBaseMs ?? 200, this.options.retryMaxMs ?? 10_000);
  }

  /** Sleeps, unless stop() comes first. */
  private async sleep(ms: number): Promise<void> {
    if (this.stopping) return;
    let wake: () => void = () => undefined;
    await wakeableSleep(ms, (w) => {
      wake = w;
      this.sleepers.add(w);
    });
    this.sleepers.delete(wake);
  }
}

/** A delivery of an entry; `logged`: its body is in the event log (empty until read from there). */
interface DecodedDelivery {
  delivery: DeliverJob;
  logged: boolean;
}

/** The deliveries of an entry's batch, or why there are none. */
function decodeBatch(fields: readonly Buffer[]): DecodedDelivery[] | string {
  const deliveries: unknown[] = [];
  const logged = new Set<number>();
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i]!.toString();
    if (name === DELIVERY_FIELD || name === LOGGED_FIELD) {
      let delivery: unknown;
      try {
        delivery = JSON.parse(fields[i + 1]!.toString('utf8'));
      } catch {
        return `delivery ${deliveries.length + 1}: the "${name}" field is not valid JSON`;
      }
      if (name === LOGGED_FIELD) {
        if (typeof delivery !== 'object' || delivery === null || 'body' in delivery)
          return `delivery ${deliveries.length + 1}: the "${LOGGED_FIELD}" field holds a body or is not an object`;
        logged.add(deliveries.length);
        (delivery as Record<string, unknown>).body = '';
      }
      deliveries.push(delivery);
    } else if (name === BODY_FIELD) {
      const last = deliveries.at(-1) as Record<string, unknown> | undefined;
      if (typeof last !== 'object' || last === null || 'body' in last)
        return `delivery ${deliveries.length}: a "${BODY_FIELD}" field without its "${DELIVERY_FIELD}" field before it`;
      last.body = fields[i + 1]!.toString('utf8');
    } else return `an unknown field "${name.slice(0, 40)}"`;
  }
  const parsed = JOBS.deliverBatch.schema.safeParse({ deliveries });
  if (parsed.success) return parsed.data.deliveries.map((delivery, n) => ({ delivery, logged: logged.has(n) }));
  const [issue] = parsed.error.issues;
  return `the batch is not valid: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'no deliveries'}`;
}
