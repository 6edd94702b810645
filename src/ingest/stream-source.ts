import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { decodeUtf8, NOT_UTF8 } from '../domain/json-text.js';
import type { Logger } from '../logger.js';
import { isRedisError, isRedisUnavailable, type Redis } from '../store/redis.js';
import {
  backoffMs,
  BlockingStreamReader,
  claimStaleRounds,
  doneBelow,
  ensureGroup,
  fieldOf,
  leaveGroupIfIdle,
  pruneIdleConsumers,
  type StreamEntry,
} from '../store/stream-reads.js';
import type { Ingestor } from './ingest.js';
import { parseTraceparent, type TraceContext } from '../domain/trace.js';

/** The consumer group Hookline reads the ingest stream with. */
export const STREAM_GROUP_DEFAULT = 'hookline-ingest';
/** The entry field that holds one event as JSON: `XADD <stream> * event '{"event_type":…}'`. */
const STREAM_EVENT_FIELD = 'event';
/** An optional field beside it: the W3C traceparent of the producer's trace, continued by the event's spans. */
const STREAM_TRACEPARENT_FIELD = 'traceparent';
/** And its W3C tracestate, passed on with it as given (up to the specification's 512 characters). */
const STREAM_TRACESTATE_FIELD = 'tracestate';
const TRACESTATE_LENGTH_MAX = 512;

export interface StreamIngestSourceOptions {
  /** Commands (XACK, XAUTOCLAIM, XTRIM, …); a duplicate of it is opened for the blocking reads. */
  redis: Redis;
  /** The stream to consume (`keys.events.streamOf(n)`). */
  stream: string;
  /** Where entries that cannot be ingested are kept with their reason (`keys.events.deadOf(n)`, the stream's own slot). */
  deadLetterStream: string;
  /** Told of each entry moved to the dead-letter stream (metrics). */
  observeDeadLetter?: (cause: StreamDeadLetterCause) => void;
  ingestor: Pick<Ingestor, 'ingest'>;
  logger: Pick<Logger, 'info' | 'warn' | 'error'>;
  /**
   * Told about the reader's own connection, so that its errors are heard and its outages logged
   * with the process's others; without it the reader's errors are ignored here (the failed reads
   * are retried either way).
   */
  watchConnection?: (connection: Redis) => void;
  /** Default STREAM_GROUP_DEFAULT. */
  group?: string;
  /** This consumer's name in the group; default host, pid and a random suffix. */
  consumer?: string;
  /** Entries per read and per ingest call; default 500, at most 1000. */
  batchSize?: number;
  /** How long one XREADGROUP waits for new entries; default 2 s. */
  blockMs?: number;
  /** Pending entries idle this long belong to a consumer presumed dead and are claimed; default 60 s. */
  claimMinIdleMs?: number;
  /** How often stale entries are claimed, the stream trimmed and idle consumers pruned; default 30 s. */
  maintenanceIntervalMs?: number;
  /** Other consumers with nothing pending and idle this long are removed from the group; default 24 h. */
  consumerIdleMaxMs?: number;
  /** Back-off after a failed batch: base doubling per failure up to max, with jitter; defaults 200 ms and 10 s. */
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** Clock, Unix ms; default Date.now. */
  nowMs?: () => number;
}

/**
 * Why an entry was set aside: it held no readable event (`unreadable`), ingest rejected its event
 * (`rejected`), or ingesting it failed when it was tried alone while the rest of its batch went
 * through (`failed`).
 */
export type StreamDeadLetterCause = 'unreadable' | 'rejected' | 'failed';

/** An entry that will not be ingested: its id and fields as read, and why. */
interface SetAside {
  entryId: string;
  fields: Buffer[] | null;
  cause: StreamDeadLetterCause;
  reason: string;
  error?: Error;
}

/** Entries the dead-letter stream keeps, about (XADD MAXLEN ~): the newest, for an operator to read and re-send. */
const DEAD_LETTERS_MAX = 10_000;
/** Consumers removed per maintenance pass. */
const CONSUMERS_PRUNED_MAX = 100;

type Decoded =
  | { ok: true; event: unknown; trace: TraceContext | undefined; traceState: string | undefined }
  | { ok: false; reason: string };

/** Reads the event of one entry; never throws. */
function decodeEntry(fields: Buffer[] | null): Decoded {
  if (fields === null) return { ok: false, reason: 'the entry was trimmed from the stream before it was ingested' };
  const bytes = fieldOf(fields, STREAM_EVENT_FIELD);
  if (bytes === undefined) return { ok: false, reason: `the entry has no "${STREAM_EVENT_FIELD}" field` };
  const json = decodeUtf8(bytes);
  if (json === undefined) return { ok: false, reason: `the "${STREAM_EVENT_FIELD}" field ${NOT_UTF8}` };
  try {
    const event = JSON.parse(json) as unknown;
    // A traceparent that is not valid is ignored (a new trace starts), as the W3C rule has it.
    const traceparent = fieldOf(fields, STREAM_TRACEPARENT_FIELD);
    const trace = traceparent === undefined ? undefined : parseTraceparent(traceparent.toString());
    const state = trace === undefined ? undefined : fieldOf(fields, STREAM_TRACESTATE_FIELD)?.toString();
    const traceState =
      state !== undefined && state.length > 0 && state.length <= TRACESTATE_LENGTH_MAX ? state : undefined;
    return { ok: true, event, trace, traceState };
  } catch {
    // Without JSON.parse's message: it quotes the text, and reasons are logged (the dead-letter stream keeps the text).
    return { ok: false, reason: `the "${STREAM_EVENT_FIELD}" field is not valid JSON` };
  }
}

/**
 * Ingests events producers append to one Redis ingest stream (one event as JSON in
 * the field `event` of each entry), through a consumer group, so many engine processes share the
 * work. An entry is acknowledged only after the Ingestor resolved for its batch, so an acknowledged
 * event's deliveries exist. An entry that can never be ingested (malformed, rejected, or failing
 * ingest on its own) is moved to the dead-letter stream with its reason and acknowledged: it must
 * not wedge the group, and must not vanish either. A failed batch stays pending, is read again from
 * this consumer's pending list after a back-off (with new entries beside it, so that they can show
 * whether the pending ones are at fault), and if this process dies, another one claims it
 * (XAUTOCLAIM) once it has been idle for `claimMinIdleMs`. The stream is trimmed below the oldest
 * entry not yet acknowledged, so it stays bounded without losing unread events.
 */
export class StreamIngestSource {
  private readonly redis: Redis;
  private readonly stream: string;
  private readonly deadLetterStream: string;
  private readonly group: string;
  private readonly consumer: string;
  private readonly batchSize: number;
  private readonly blockMs: number;
  private readonly claimMinIdleMs: number;
  private readonly maintenanceIntervalMs: number;
  private readonly consumerIdleMaxMs: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly nowMs: () => number;

  private reader: BlockingStreamReader | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  private wake: (() => void) | undefined;

  constructor(private readonly options: StreamIngestSourceOptions) {
    this.redis = options.redis;
    this.stream = options.stream;
    this.deadLetterStream = options.deadLetterStream;
    this.group = options.group ?? STREAM_GROUP_DEFAULT;
    this.consumer = options.consumer ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
    this.batchSize = options.batchSize ?? 500;
    this.blockMs = options.blockMs ?? 2_000;
    this.claimMinIdleMs = options.claimMinIdleMs ?? 60_000;
    this.maintenanceIntervalMs = options.maintenanceIntervalMs ?? 30_000;
    this.consumerIdleMaxMs = options.consumerIdleMaxMs ?? 24 * 3_600_000;
    this.retryBaseMs = options.retryBaseMs ?? 200;
    this.retryMaxMs = options.retryMaxMs ?? 10_000;
    this.nowMs = options.nowMs ?? Date.now;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1 || this.batchSize > 1000) {
      throw new RangeError(`batchSize must be a whole number from 1 to 1000, got ${this.batchSize}`);
    }
  }

  /** This consumer's name in the group. */
  get consumerName(): string {
    return this.consumer;
  }

  /** Creates the group (and the stream) when missing, then consumes in the background until stop(). */
  async start(): Promise<void> {
    if (this.loop || this.stopping) throw new Error('the stream ingest source can be started once');
    await this.ensureGroup();
    this.reader = new BlockingStreamReader(this.redis, this.stream, 'ingest-stream', this.options.watchConnection);
    this.loop = this.run(this.reader);
  }

  /**
   * Stops consuming: a batch being ingested is finished and acknowledged first. A blocked read is
   * ended with CLIENT UNBLOCK, which Redis applies atomically: either the read already took entries
   * (they are then ingested too) or it returns none. On a cluster it goes to the node serving the
   * stream. Only when that is impossible (Redis unreachable, or the stream's slot moved during the
   * read) is the reader's connection closed after `blockMs`; entries it took stay pending and are claimed.
   */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.wake?.();
    if (!this.loop || !this.reader) return;
    await this.reader.close(this.loop, this.blockMs);
    await this.leaveGroupIfIdle();
  }

  private ensureGroup(): Promise<void> {
    return ensureGroup(this.redis, this.stream, this.group);
  }

  private async run(reader: BlockingStreamReader): Promise<void> {
    let failures = 0;
    // Start with this consumer's own pending entries (a restart under the same name) and return
    // to them after every failure: a batch whose ingest failed is still pending with us.
    let ownPendingFirst = true;
    let maintenanceDueAtMs = 0;
    while (!this.stopping) {
      try {
        if (this.nowMs() >= maintenanceDueAtMs) {
          maintenanceDueAtMs = this.nowMs() + this.maintenanceIntervalMs;
          await this.maintain();
        }
        let entries = await this.read(reader, ownPendingFirst ? '0' : '>');
        if (ownPendingFirst && entries.length > 0 && entries.length < this.batchSize) {
          // New entries join the pending ones, without waiting for any: a pending entry that fails
          // alone is set aside only when others go through (see process), and without new ones a
          // lone bad entry would be retried for ever while everything behind it waited.
          entries = [...entries, ...(await this.read(reader, '>', this.batchSize - entries.length))];
        }
        if (entries.length > 0) await this.process(entries);
        else ownPendingFirst = false;
        failures = 0;
      } catch (error) {
        if (this.stopping) break;
        failures += 1;
        ownPendingFirst = true;
        reader.forget();
        if (/NOGROUP/.test((error as Error).message)) {
          // The stream or the group was deleted under us; recreate them.
          await this.ensureGroup().catch(() => undefined);
        }
        const delayMs = this.backoffMs(failures);
        // An outage is logged once by the connection watcher, not on every retry.
        if (!isRedisUnavailable(error as Error)) {
          this.options.logger.error(
            { err: error, failures, retryInMs: delayMs },
            'ingest stream: batch failed; its entries stay pending and are retried',
          );
        }
        await this.pause(delayMs);
      }
    }
  }

  /**
   * One XREADGROUP; `'>'` for new entries, `'0'` for this consumer's pending ones. Without `count`
   * a read of new entries blocks for up to blockMs; with it, it takes only what is there.
   */
  private read(reader: BlockingStreamReader, from: '>' | '0', count?: number): Promise<StreamEntry[]> {
    // Buffer replies: a string reply would decode the event lossily, hiding bytes that are not UTF-8.
    return reader.read(
      {
        group: this.group,
        consumer: this.consumer,
        from,
        count: count ?? this.batchSize,
        ...(count === undefined ? { blockMs: this.blockMs } : {}),
      },
      () => this.stopping,
    );
  }

  /**
   * Ingests a batch of entries and acknowledges them, never before ingest resolved for them. When
   * ingest fails for a reason other than Redis, the batch is split and its halves tried, until the
   * entries that fail on their own are found; these are set aside in the dead-letter stream, but
   * only if another entry of the batch went through. If none did, the failure may well be ingest's
   * own (a bug that fails every event), so every entry stays pending and the error is thrown. A
   * Redis failure leaves whatever is not yet acknowledged pending and is thrown at once.
   */
  private async process(entries: readonly StreamEntry[]): Promise<void> {
    // Parts in stream order; at most 2n - 1 ingest calls for n entries.
    const parts: StreamEntry[][] = [[...entries]];
    const failedAlone: { entry: StreamEntry; error: Error }[] = [];
    let through = 0;
    for (let part = parts.shift(); part !== undefined; part = parts.shift()) {
      try {
        await this.ingestAndAcknowledge(part);
        through += part.length;
      } catch (thrown) {
        const error = thrown as Error;
        if (isRedisError(error)) throw error;
        const half = Math.ceil(part.length / 2);
        if (part.length > 1) parts.unshift(part.slice(0, half), part.slice(half));
        else failedAlone.push(...part.map((entry) => ({ entry, error })));
      }
    }
    const [first] = failedAlone;
    if (first === undefined) return;
    if (through === 0) throw first.error;
    await this.acknowledge(
      [],
      failedAlone.map(({ entry: [entryId, fields], error }) => ({
        entryId,
        fields,
        cause: 'failed',
        reason: `ingest failed on this entry alone: ${String(error)}`,
        error,
      })),
    );
  }

  /** Ingests entries as one batch; acknowledges them all, setting aside those without a readable event and those ingest rejected. */
  private async ingestAndAcknowledge(entries: readonly StreamEntry[]): Promise<void> {
    const aside: (SetAside | undefined)[] = new Array<SetAside | undefined>(entries.length);
    const events: unknown[] = [];
    const eventAt: number[] = [];
    const traces: (TraceContext | undefined)[] = [];
    const states: (string | undefined)[] = [];
    let traced = false;
    entries.forEach(([entryId, fields], i) => {
      const decoded = decodeEntry(fields);
      if (!decoded.ok) aside[i] = { entryId, fields, cause: 'unreadable', reason: decoded.reason };
      else {
        events.push(decoded.event);
        eventAt.push(i);
        traces.push(decoded.trace);
        states.push(decoded.traceState);
        if (decoded.trace !== undefined) traced = true;
      }
    });
    if (events.length > 0) {
      const results = await this.options.ingestor.ingest(events, 'stream', {
        stream: this.stream,
        ...(traced ? { perEvent: traces, perEventState: states } : {}),
      });
      results.forEach((result, j) => {
        const i = eventAt[j]!;
        const [entryId, fields] = entries[i]!;
        if (result.status === 'rejected')
          aside[i] = { entryId, fields, cause: 'rejected', reason: result.reason ?? 'rejected' };
      });
    }
    await this.acknowledge(
      entries.map(([entryId]) => entryId),
      aside.filter((entry) => entry !== undefined),
    );
  }

  /**
   * Copies the entries set aside to the dead-letter stream (their reason, the time, their entry id,
   * then their fields as they were) and acknowledges them with `entryIds`, in one transaction on the
   * stream's slot: an entry is never acknowledged without its copy kept. Logs each by id and reason,
   * never its content.
   */
  private async acknowledge(entryIds: readonly string[], aside: readonly SetAside[]): Promise<void> {
    if (aside.length === 0) {
      await this.redis.xack(this.stream, this.group, ...entryIds);
      return;
    }
    const failedAt = new Date(this.nowMs()).toISOString();
    const transaction = this.redis.multi();
    for (const { entryId, fields, reason } of aside) {
      transaction.xadd(
        this.deadLetterStream,
        'MAXLEN',
        '~',
        DEAD_LETTERS_MAX,
        '*',
        'reason',
        reason,
        'failed_at',
        failedAt,
        'entry_id',
        entryId,
        ...(fields ?? []),
      );
    }
    transaction.xack(this.stream, this.group, ...new Set([...entryIds, ...aside.map(({ entryId }) => entryId)]));
    const failure = (await transaction.exec())?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
    for (const { entryId, cause, reason, error } of aside) {
      const line = { entryId, cause, reason, deadLetterStream: this.deadLetterStream };
      if (error) this.options.logger.error({ ...line, err: error }, 'ingest stream: entry set aside');
      else this.options.logger.warn(line, 'ingest stream: entry set aside');
      this.options.observeDeadLetter?.(cause);
    }
  }

  /** Claims stale entries of dead consumers (and ingests them), then tidies the stream and the group. */
  private async maintain(): Promise<void> {
    await claimStaleRounds(
      this.redis,
      {
        stream: this.stream,
        group: this.group,
        consumer: this.consumer,
        minIdleMs: this.claimMinIdleMs,
        count: this.batchSize,
      },
      async (claimed) => {
        this.options.logger.info(
          { entries: claimed.length },
          'ingest stream: claimed stale entries of another consumer',
        );
        await this.process(claimed);
      },
    );
    // Housekeeping only: a failure here must not hold up ingest.
    try {
      await this.trim();
      await pruneIdleConsumers(this.redis, {
        stream: this.stream,
        group: this.group,
        self: this.consumer,
        idleMaxMs: this.consumerIdleMaxMs,
        max: CONSUMERS_PRUNED_MAX,
      });
    } catch (error) {
      if (!isRedisUnavailable(error as Error)) {
        this.options.logger.warn(
          { err: error },
          'ingest stream: trimming or pruning failed; retried at the next maintenance',
        );
      }
    }
  }

  /**
   * Deletes the entries the group is done with (see doneBelow): those below the oldest pending
   * entry, or, when nothing is pending, every one delivered, the last one too, so an idle stream
   * keeps no event (its last node went only when a newer entry came after it).
   */
  private async trim(): Promise<void> {
    const bound = await doneBelow(this.redis, this.stream, this.group);
    if (bound !== undefined) await this.redis.xtrim(this.stream, 'MINID', '~', bound);
  }

  /** On a clean stop, removes this consumer from the group unless it still holds pending entries. */
  private async leaveGroupIfIdle(): Promise<void> {
    // With Redis unreachable there is no group to leave now: shutdown does not wait for it to answer.
    if (this.redis.status !== 'ready') return;
    try {
      await leaveGroupIfIdle(this.redis, this.stream, this.group, this.consumer);
    } catch (error) {
      this.options.logger.warn({ err: error }, 'ingest stream: could not leave the consumer group');
    }
  }

  private backoffMs(failures: number): number {
    return backoffMs(failures, this.retryBaseMs, this.retryMaxMs);
  }

  /** Sleeps, unless stop() comes first. */
  private pause(delayMs: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, delayMs);
      this.wake = done;
    });
  }
}
