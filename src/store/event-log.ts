import type { DeliveryStatus } from '../domain/delivery.js';
import { bodyBytesEstimate, chunksOf, COMMAND_BYTES_MAX, runsOf, sortedBy } from '../lib/chunks.js';
import type { RedisKeys } from './keys.js';
import { slotGroups, type Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

/** One event in a webhook's log. */
export interface LoggedEvent {
  /** Its place in the log: the feed's cursor (a Redis stream id, `<ms>-<n>`). */
  cursor: string;
  /** When the engine logged it (Redis's clock, within milliseconds of the accept). */
  acceptedAtMs: number;
  /** The delivery ingest made of it (a replay of it gets a new id). */
  deliveryId: string;
  eventId: string;
  eventType: string;
  /** Its delivery's final status once it has one, else the delivery record's, else pending. */
  status: DeliveryStatus;
  /** The body delivered, when asked for. */
  body?: string;
}

/** An event ingest matched to a webhook, for the log. */
export interface EventLogEntry {
  webhookId: string;
  deliveryId: string;
  eventId: string;
  eventType: string;
  body: string;
}

/** A count of a log's range (see RedisEventLog.count). */
export interface LogCount {
  count: number;
  /** Entries read. */
  read: number;
  /** More entries of the range were left unread: `count` is a lower bound. */
  capped: boolean;
}

/** Which events of a log a scan takes. */
export interface EventLogRange {
  /** Accepted at or after (ms). */
  sinceMs?: number;
  /** Accepted at or before (ms). */
  untilMs?: number;
  /** Continue after this cursor (exclusive). */
  after?: string;
  /** Only these statuses (as the feed shows them). */
  statuses?: readonly DeliveryStatus[];
  /** Only these event types. */
  eventTypes?: readonly string[];
}

/** How long events and delivery records are kept unless HOOKLINE_RETENTION says otherwise. */
export const DEFAULT_RETENTION_MS = 7 * 24 * 3_600_000;

/** Whether `text` is a feed cursor: a stream id, `<ms>-<sequence>`, each part within Redis's 64 bits. */
export function isLogCursor(text: string): boolean {
  const match = /^(\d{1,20})-(\d{1,20})$/.exec(text);
  return match !== null && BigInt(match[1]!) <= UINT64_MAX && BigInt(match[2]!) <= UINT64_MAX;
}
const UINT64_MAX = 2n ** 64n - 1n;

/** Entries appended by one script call at most (and COMMAND_BYTES_MAX of them: see src/lib/chunks.ts). */
const ENTRIES_PER_CALL_MAX = 500;
/** An entry's bytes in an append: its body, and about 200 for its keys and ids. */
const entryBytes = (entry: EventLogEntry) => bodyBytesEstimate(entry.body) + 200;
/** Entries past the retention one append removes per webhook at most, so a call's work stays bounded. */
const TRIM_PER_APPEND_MAX = 32;
/** Entries one maintenance call removes at most; maintenance calls again until nothing is left. */
const TRIM_PER_CALL_MAX = 1_000;
/** Entries an erasure reads per page. */
const ERASE_PAGE = 1_000;
/**
 * Entries one counting call reads at most: a call blocks Redis for about 5 ms at most (an entry costs
 * 3-5 µs: 20,000 were counted in 55 ms, 96 ms with a status filter), so other clients are served
 * between the calls of a long count.
 */
const COUNT_PER_CALL_MAX = 1_000;

type PageRow = [
  id: string,
  deliveryId: string,
  eventId: string,
  eventType: string,
  status: string | null,
  body: string | null,
];

/**
 * Each webhook's event log: every event ingest matched to it, in accept order, with the body it was
 * delivered, kept for the retention period. The event feed pages it, range replays read it, and
 * erasure removes from it. Written by ingest beside the batch's enqueue (one script per slot, no
 * round trip of its own), under the webhook's hash tag with its delivery log.
 */
export class RedisEventLog {
  private readonly appendScript: ScriptCall<[routing: string], ScriptArg[], number>;
  private readonly pageScript: ScriptCall<[log: string, bodies: string, statuses: string], ScriptArg[], PageRow[]>;
  private readonly countScript: ScriptCall<[log: string, statuses: string], ScriptArg[], [number, string, number]>;
  private readonly trimScript: ScriptCall<[log: string, bodies: string, statuses: string], ScriptArg[], number>;
  private readonly bodiesScript: ScriptCall<[routing: string], ScriptArg[], (string | null)[]>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
    /** How long events are kept (HOOKLINE_RETENTION); a webhook's own shorter retention is applied by `trim`. */
    private readonly retentionMs: number,
  ) {
    this.appendScript = defineScriptFile(redis, 'event-log-append', 1);
    this.pageScript = defineScriptFile(redis, 'event-log-page', 3);
    this.countScript = defineScriptFile(redis, 'event-log-count', 2);
    this.trimScript = defineScriptFile(redis, 'event-log-trim', 3);
    this.bodiesScript = defineScriptFile(redis, 'event-log-bodies', 1);
  }

  private keysOf(webhookId: string): [log: string, bodies: string, statuses: string] {
    const { log, logBodies, logStatuses } = this.keys.deliveries;
    return [log(webhookId), logBodies(webhookId), logStatuses(webhookId)];
  }

  /** Appends ingest's matched events; idempotent per delivery id. */
  async append(entries: readonly EventLogEntry[]): Promise<void> {
    // A webhook's entries side by side (each keeps its accept order), so that a call names the
    // webhook's keys and pays its trim and TTLs once for all of them.
    const { log } = this.keys.deliveries;
    const webhookOf = (entry: EventLogEntry) => entry.webhookId;
    await Promise.all(
      slotGroups(this.redis, sortedBy(entries, webhookOf), (entry) => log(entry.webhookId))
        .flatMap((group) => chunksOf(group, entryBytes, COMMAND_BYTES_MAX, ENTRIES_PER_CALL_MAX))
        .map((group) => {
          const args: ScriptArg[] = [this.retentionMs, TRIM_PER_APPEND_MAX];
          for (const [webhookId, run] of runsOf(group, webhookOf)) {
            args.push(...this.keysOf(webhookId), run.length);
            for (const entry of run) args.push(entry.deliveryId, entry.eventId, entry.eventType, entry.body);
          }
          return this.appendScript([log(group[0]!.webhookId)], ...args);
        }),
    );
  }

  /**
   * The bodies the logs hold for these deliveries, in input order (undefined where none is: the
   * event was erased, or its retention passed): one script call per slot, each webhook's asked
   * once. First attempts read their bodies here when their stream entry refers to the log.
   */
  async bodiesOf(refs: readonly { webhookId: string; deliveryId: string }[]): Promise<(string | undefined)[]> {
    const { logBodies } = this.keys.deliveries;
    const webhookOf = (i: number) => refs[i]!.webhookId;
    const order = sortedBy(
      refs.map((_, i) => i),
      webhookOf,
    );
    const out = new Array<string | undefined>(refs.length);
    await Promise.all(
      slotGroups(this.redis, order, (i) => logBodies(webhookOf(i)), ENTRIES_PER_CALL_MAX).map(async (group) => {
        const args: ScriptArg[] = [];
        for (const [webhookId, run] of runsOf(group, webhookOf))
          args.push(logBodies(webhookId), run.length, ...run.map((i) => refs[i]!.deliveryId));
        const bodies = await this.bodiesScript([logBodies(webhookOf(group[0]!))], ...args);
        group.forEach((i, n) => (out[i] = bodies[n] ?? undefined));
      }),
    );
    return out;
  }

  /**
   * Up to `limit` events of the range, oldest first, and the cursor after the last one read (absent
   * when the range has no more). Filters apply to the events read, so a page may hold fewer than
   * `limit` while `next` is still given.
   */
  async page(
    webhookId: string,
    range: EventLogRange & { limit: number; withBodies?: boolean },
  ): Promise<{ events: LoggedEvent[]; next: string | undefined }> {
    const [start, end] = bounds(range);
    const rows = await this.pageScript(
      this.keysOf(webhookId),
      start,
      end,
      range.limit,
      range.withBodies ? 1 : 0,
      this.recordPrefix(webhookId),
    );
    const types = range.eventTypes ? new Set(range.eventTypes) : undefined;
    const statuses = range.statuses ? new Set<string>(range.statuses) : undefined;
    const events = rows.flatMap(([cursor, deliveryId, eventId, eventType, status, body]): LoggedEvent[] => {
      const shown = (status ?? 'pending') as DeliveryStatus;
      if (types && !types.has(eventType)) return [];
      if (statuses && !statuses.has(shown)) return [];
      return [
        {
          cursor,
          acceptedAtMs: Number(cursor.slice(0, cursor.indexOf('-'))),
          deliveryId,
          eventId,
          eventType,
          status: shown,
          ...(range.withBodies && body !== null ? { body } : {}),
        },
      ];
    });
    const next = rows.length === range.limit ? rows[rows.length - 1]![0] : undefined;
    return { events, next };
  }

  /**
   * How many events of the range match its filters, reading at most `readMax` entries of it (in
   * calls of COUNT_PER_CALL_MAX; nothing held in memory). `capped`: the range holds more entries
   * than were read, so `count` is a lower bound. `read`: the entries read (what the count cost).
   */
  async count(webhookId: string, range: EventLogRange, readMax = Infinity): Promise<LogCount> {
    const [log, , statuses] = this.keysOf(webhookId);
    let [start] = bounds(range);
    const [, end] = bounds(range);
    let count = 0;
    let read = 0;
    // Bounded: each call reads at least one entry more, or the range ended.
    for (;;) {
      const max = Math.min(COUNT_PER_CALL_MAX, readMax - read);
      if (max <= 0) {
        // Read as much as allowed: capped, unless the range ends right there.
        const more = await this.redis.xrange(log, start, end, 'COUNT', 1);
        return { count, read, capped: more.length > 0 };
      }
      const [matched, last, readNow] = await this.countScript(
        [log, statuses],
        start,
        end,
        max,
        this.recordPrefix(webhookId),
        (range.eventTypes ?? []).join('\n'),
        (range.statuses ?? []).join('\n'),
      );
      count += Number(matched);
      read += Number(readNow);
      if (last === '') return { count, read, capped: false };
      start = `(${last}`;
    }
  }

  /** How many entries the webhook's log holds (an upper bound of any count of it, O(1)). */
  async size(webhookId: string): Promise<number> {
    return this.redis.xlen(this.keysOf(webhookId)[0]);
  }

  /**
   * Removes the log's events older than `retentionMs` (the webhook's own, or the default); returns
   * how many. A webhook's own retention, shorter than the installation's, keeps an event whose first
   * attempt has not been made (its first-attempt entry may read its body here) until the
   * installation's retention has passed too.
   */
  async trim(webhookId: string, retentionMs = this.retentionMs): Promise<number> {
    let removed = 0;
    // Bounded: a log holds what was appended within its retention, removed a call's worth at a time.
    for (let calls = 0; calls < 10_000; calls += 1) {
      const n = Number(
        await this.trimScript(
          this.keysOf(webhookId),
          Math.min(retentionMs, this.retentionMs),
          TRIM_PER_CALL_MAX,
          this.retentionMs,
          this.recordPrefix(webhookId),
        ),
      );
      removed += n;
      if (n < TRIM_PER_CALL_MAX) break;
    }
    return removed;
  }

  /**
   * Erases deliveries' events from a webhook's log: bodies and statuses at once, then the entries
   * (found by reading the log a page at a time, so no call blocks Redis for long); how many entries went.
   */
  async erase(webhookId: string, deliveryIds: readonly string[]): Promise<number> {
    if (deliveryIds.length === 0) return 0;
    const [log, bodies, statuses] = this.keysOf(webhookId);
    const held = await this.redis.hmget(bodies, ...deliveryIds);
    if (held.every((body) => body === null)) return 0;
    await this.redis
      .multi()
      .hdel(bodies, ...deliveryIds)
      .hdel(statuses, ...deliveryIds)
      .exec();
    const wanted = new Set(deliveryIds);
    let erased = 0;
    let start = '-';
    // Bounded: the log holds what its retention allows, read ERASE_PAGE entries at a time.
    for (let pages = 0; pages < 1_000_000; pages += 1) {
      const entries = await this.redis.xrange(log, start, '+', 'COUNT', ERASE_PAGE);
      const ids = entries.flatMap(([id, fields]) => (wanted.has(fields[1] ?? '') ? [id] : []));
      if (ids.length > 0) erased += await this.redis.xdel(log, ...ids);
      if (entries.length < ERASE_PAGE) break;
      start = `(${entries.at(-1)![0]}`;
    }
    return erased;
  }

  /** The default retention (ms). */
  get defaultRetentionMs(): number {
    return this.retentionMs;
  }

  private recordPrefix(webhookId: string): string {
    return this.keys.deliveries.record(webhookId, '');
  }
}

/**
 * The stream ids a range spans (inclusive; `(` makes the start exclusive after a cursor); a cursor
 * before `sinceMs` starts at `sinceMs`.
 */
function bounds(range: EventLogRange): [start: string, end: string] {
  const sinceMs = range.sinceMs === undefined ? undefined : Math.max(0, Math.floor(range.sinceMs));
  const afterMs = range.after === undefined ? undefined : Number(range.after.slice(0, range.after.indexOf('-')));
  const start =
    range.after !== undefined && (sinceMs === undefined || afterMs! >= sinceMs)
      ? `(${range.after}`
      : sinceMs === undefined
        ? '-'
        : `${sinceMs}`;
  const end = range.untilMs === undefined ? '+' : `${Math.floor(range.untilMs)}`;
  return [start, end];
}
