import { UNSENT_OUTCOMES } from '../domain/delivery.js';
import type { RedisKeys } from './keys.js';
import { slotGroups, type Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';

/**
 * Per-webhook delivery stats for the vendor portal (`GET /vendors/v1/webhooks/{id}/stats`): bounded
 * counters in Redis, so that no metric needs a label per webhook.
 *
 * What counts: every attempt a worker sent, or tried to send, and recorded. `delivered` is a 2xx;
 * `failed` is every other such attempt (3xx, 4xx, 5xx, timeout, dns, connect, tls, network,
 * ssrf_blocked). An attempt recorded as `circuit_open` (due while the endpoint's circuit was open),
 * `webhook_disabled` or `paused_expired` was never sent and says nothing about the receiver, so it
 * is no attempt here. The latency histogram holds the attempts the receiver answered, and timeouts (at the
 * timeout: a lower bound of their real time); an error before any answer has no response time.
 *
 * Layout, under the webhook's hash tag (the Redis Cluster slot of its delivery log):
 * - one hash per 10-minute slot: `<minute 0-9>d` and `<minute 0-9>f` per minute, `b<i>` the slot's
 *   latency buckets (at most 33 fields); it expires once no read of the last hour reaches into it;
 * - one hash per quarter-day (6 clock hours): `<hour 0-5>d`, `<hour 0-5>f` and `<hour 0-5>b<i>`
 *   (at most 90 fields); it expires a day after its last hour ends;
 * - the newest attempt sent, kept 7 days like the delivery log.
 * Every hash stays below Redis's listpack limit (128 fields by default), so it stays compact. A
 * webhook with attempts in every minute of a day holds 7 or 8 slots, 5 or 6 quarter-days and its
 * last attempt: measured with MEMORY USAGE on Redis 7.0, 2.9 KB with steady traffic (answers in
 * two latency buckets) and 6.3 KB in the worst case (both outcomes and every latency bucket every
 * minute); 4.0 KB and 8.2 KB with Redis's per-key overhead (used_memory over 200 webhooks).
 * test/integration/endpoint-stats.test.ts checks the MEMORY USAGE figures. An idle webhook costs
 * nothing once its keys expire.
 *
 * Windows: `hour` counts the last 60 minutes (this minute included) and takes its percentiles from
 * the 10-minute slots those minutes fall in (60 to 69 minutes); `day` is the current clock hour and
 * the 24 before it (24 to 25 hours). Percentiles interpolate linearly within their bucket, so the
 * answer lies in the bucket of the true percentile: within 5 ms below 5 ms, else within a factor of
 * 2.5 (3 between 10 s and 30 s); beyond the last bound it reads 30 000 ms.
 *
 * Writes cost the delivery hot path no round trip: workers count in memory and flush every second,
 * one script call per webhook and slot (auto-pipelined together). A worker that dies loses at most
 * its last second of counts; a flush that fails (Redis unreachable) is dropped, not retried, so the
 * buffer stays bounded.
 */

const MINUTE_MS = 60_000;
const SLOT_MINUTES = 10;
const HOUR_MINUTES = 60;
const HOUR_MS = HOUR_MINUTES * MINUTE_MS;
/** Clock hours per quarter-day hash: at most 6 × 15 fields stays a listpack, and 5 keys hold a day instead of 25. */
const QUARTER_HOURS = 6;
/** Past the newest read that needs a key, how long it stays: workers' and API processes' clocks differ a little. */
const CLOCK_SKEW_MS = 2 * MINUTE_MS;
/** How long the newest attempt is kept when no other follows (the delivery log's retention). */
const LAST_ATTEMPT_TTL_MS = 7 * 24 * HOUR_MS;
const FLUSH_EVERY_MS = 1_000;
/** Webhooks one worker buffers at most between flushes; counts of others past it are dropped. */
const PENDING_MAX = 10_000;

/** Upper bounds of the latency buckets (ms), log-spaced; one more bucket holds everything longer. */
export const LATENCY_BOUNDS_MS = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000] as const;

/** The latency bucket of an attempt that took `ms`: the first whose bound is at least `ms`, or the last (unbounded) one. */
export function latencyBucket(ms: number): number {
  let i = 0;
  while (i < LATENCY_BOUNDS_MS.length && ms > LATENCY_BOUNDS_MS[i]!) i += 1;
  return i;
}

/**
 * The `q` quantile (0 < q ≤ 1) of the latencies counted in `buckets`, interpolated linearly within
 * the bucket that holds it (the first bucket starts at 0; the unbounded one reads its lower bound);
 * null when nothing was counted.
 */
export function percentileMs(buckets: readonly number[], q: number): number | null {
  const total = buckets.reduce((sum, n) => sum + n, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (const [i, n] of buckets.entries()) {
    if (n > 0 && below + n >= rank) {
      const upper = LATENCY_BOUNDS_MS[i];
      const lower = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!;
      return upper === undefined ? lower : lower + ((upper - lower) * (rank - below)) / n;
    }
    below += n;
  }
  return LATENCY_BOUNDS_MS.at(-1)!;
}

interface Tally {
  field: 'd' | 'f';
  /** Whether its duration is a response time (answered, or timed out). */
  timed: boolean;
}
const DELIVERED: Tally = { field: 'd', timed: true };
const ANSWERED_FAILED: Tally = { field: 'f', timed: true };
const UNANSWERED_FAILED: Tally = { field: 'f', timed: false };

/** How an attempt's outcome counts: undefined for one that was never sent. */
function tallyOf(outcome: string): Tally | undefined {
  if (UNSENT_OUTCOMES.has(outcome)) return undefined;
  switch (outcome) {
    case 'delivered':
      return DELIVERED;
    case 'http_3xx':
    case 'http_4xx':
    case 'http_5xx':
    case 'timeout':
      return ANSWERED_FAILED;
    default:
      return UNANSWERED_FAILED;
  }
}

/** The Unix minute of a time. */
const minuteOf = (ms: number) => Math.floor(ms / MINUTE_MS);
const slotOfMinute = (minute: number) => Math.floor(minute / SLOT_MINUTES);
const hourOfMinute = (minute: number) => Math.floor(minute / HOUR_MINUTES);
const hourOfSlot = (slot: number) => Math.floor((slot * SLOT_MINUTES) / HOUR_MINUTES);
const quarterOfHour = (hour: number) => Math.floor(hour / QUARTER_HOURS);

/** When a slot's hash may go: the last read of an hour window that reaches into it is an hour after it ends. */
export const slotExpiresAtMs = (slot: number) => (slot + 1) * SLOT_MINUTES * MINUTE_MS + HOUR_MS + CLOCK_SKEW_MS;
/** When a quarter-day's hash may go: the last day window that holds its last hour ends a day after that hour. */
export const quarterExpiresAtMs = (quarter: number) =>
  (quarter + 1) * QUARTER_HOURS * HOUR_MS + 24 * HOUR_MS + CLOCK_SKEW_MS;

/** The Unix minutes, 10-minute slots, hours and quarter-days a read at `nowMs` covers, oldest first. */
export function statsLayout(nowMs: number): {
  minutes: number[];
  slots: number[];
  hours: number[];
  quarters: number[];
} {
  const now = minuteOf(nowMs);
  const minutes = Array.from({ length: HOUR_MINUTES }, (_, i) => now - HOUR_MINUTES + 1 + i);
  const firstSlot = slotOfMinute(minutes[0]!);
  const slots = Array.from({ length: slotOfMinute(now) - firstSlot + 1 }, (_, i) => firstSlot + i);
  const hours = Array.from({ length: 25 }, (_, i) => hourOfMinute(now) - 24 + i);
  const firstQuarter = quarterOfHour(hours[0]!);
  const quarters = Array.from({ length: quarterOfHour(hours.at(-1)!) - firstQuarter + 1 }, (_, i) => firstQuarter + i);
  return { minutes, slots, hours, quarters };
}

/** One attempt as the worker finished it. */
export interface AttemptSample {
  webhookId: string;
  /** delivered, http_5xx, timeout, circuit_open, … (the delivery log's outcome). */
  outcome: string;
  statusCode: number | undefined;
  startedAtMs: number;
  endedAtMs: number;
  durationMs: number;
}

/** Counts and response times over one window. */
export interface StatsWindow {
  attempts: number;
  delivered: number;
  failed: number;
  /** delivered ÷ attempts; undefined without attempts. */
  successRate: number | undefined;
  p50Ms: number | undefined;
  p95Ms: number | undefined;
}

/** What the stats route shows of one webhook. */
export interface EndpointStats {
  hour: StatsWindow;
  day: StatsWindow;
  /** The last 60 minutes, oldest first, zeros included. */
  minutes: { atMs: number; delivered: number; failed: number }[];
  /** Attempts sent in the last full minute (the one before the current), per second. */
  sendRatePerSecond: number;
  last: { atMs: number; outcome: string; statusCode: number | undefined; durationMs: number } | undefined;
}

/** The worker's side: counts an attempt; never throws, never waits. */
export interface EndpointStatsRecorder {
  observe(sample: AttemptSample): void;
}

/** The API's side. */
export interface EndpointStatsReader {
  read(webhookId: string, nowMs: number): Promise<EndpointStats>;
}

/** Slot entries written by one script call at most. */
const FLUSH_ENTRIES_PER_CALL_MAX = 200;

/** One webhook's counts of one slot, waiting for the next flush. */
/** One webhook's counts since the last flush: field → increment, per 10-minute slot; and its newest attempt. */
interface Pending {
  slots: Map<number, Map<string, number>>;
  last: AttemptSample;
}

// Field names built once: counting an attempt allocates nothing on the delivery hot path.
const MINUTE_FIELDS = {
  d: Array.from({ length: SLOT_MINUTES }, (_, m) => `${m}d`),
  f: Array.from({ length: SLOT_MINUTES }, (_, m) => `${m}f`),
};
const BUCKET_FIELDS = Array.from({ length: LATENCY_BOUNDS_MS.length + 1 }, (_, i) => `b${i}`);

function increment(fields: Map<string, number>, field: string): void {
  fields.set(field, (fields.get(field) ?? 0) + 1);
}

/** The stored form of the newest attempt: `<startedAtMs>|<outcome>|<status>|<durationMs>`. */
const lastText = (s: AttemptSample) =>
  `${s.startedAtMs}|${s.outcome}|${s.statusCode ?? ''}|${Math.round(s.durationMs)}`;

const emptyBuckets = () => new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);

function windowOf(delivered: number, failed: number, buckets: readonly number[]): StatsWindow {
  const attempts = delivered + failed;
  const p50 = percentileMs(buckets, 0.5);
  const p95 = percentileMs(buckets, 0.95);
  return {
    attempts,
    delivered,
    failed,
    successRate: attempts === 0 ? undefined : delivered / attempts,
    p50Ms: p50 ?? undefined,
    p95Ms: p95 ?? undefined,
  };
}

/** Adds a hash's `<prefix>b<i>` fields into `buckets`. */
function addBuckets(buckets: number[], hash: Record<string, string>, prefix = ''): void {
  for (let i = 0; i < buckets.length; i += 1) buckets[i]! += Number(hash[`${prefix}b${i}`] ?? 0);
}

/** The counters in Redis, and the worker's buffer in front of them (see the notes at the top). */
export class RedisEndpointStats implements EndpointStatsRecorder, EndpointStatsReader {
  /** By webhook id. */
  private pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private readonly flushScript: ScriptCall<[routing: string], ScriptArg[], number>;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'endpointStats'>,
    /** A flush that failed (its counts are dropped). */
    private readonly onError: (error: Error) => void = () => undefined,
  ) {
    this.flushScript = defineScriptFile(redis, 'endpoint-stats-flush', 1);
  }

  observe(sample: AttemptSample): void {
    const tally = tallyOf(sample.outcome);
    if (tally === undefined) return;
    const minute = minuteOf(sample.endedAtMs);
    const slot = slotOfMinute(minute);
    let pending = this.pending.get(sample.webhookId);
    if (pending === undefined) {
      if (this.pending.size >= PENDING_MAX) return;
      pending = { slots: new Map(), last: sample };
      this.pending.set(sample.webhookId, pending);
    } else if (pending.last.startedAtMs <= sample.startedAtMs) pending.last = sample;
    let fields = pending.slots.get(slot);
    if (fields === undefined) {
      fields = new Map();
      pending.slots.set(slot, fields);
    }
    increment(fields, MINUTE_FIELDS[tally.field][minute - slot * SLOT_MINUTES]!);
    if (tally.timed) increment(fields, BUCKET_FIELDS[latencyBucket(sample.durationMs)]!);
    this.timer ??= setInterval(() => void this.flush(), FLUSH_EVERY_MS).unref();
  }

  /** Writes what is buffered: one script call per Redis Cluster slot (one in all on a single server). Skipped while the previous flush runs. */
  flush(): Promise<void> {
    if (this.flushing !== undefined || this.pending.size === 0) return this.flushing ?? Promise.resolve();
    const batch = this.pending;
    this.pending = new Map();
    const k = this.keys.endpointStats;
    const entries = [...batch].flatMap(([webhookId, { slots, last }]) =>
      [...slots].map(([slot, fields], i) => {
        const hour = hourOfSlot(slot);
        const quarter = quarterOfHour(hour);
        const key = k.slot(webhookId, slot);
        const argv: ScriptArg[] = [
          key,
          k.quarter(webhookId, quarter),
          k.last(webhookId),
          // The newest attempt once per webhook, with its first slot.
          i === 0 ? lastText(last) : '',
          LAST_ATTEMPT_TTL_MS,
          slotExpiresAtMs(slot),
          quarterExpiresAtMs(quarter),
          hour - quarter * QUARTER_HOURS,
          fields.size,
          ...[...fields].flat(),
        ];
        return { key, argv };
      }),
    );
    const calls = slotGroups(this.redis, entries, (entry) => entry.key, FLUSH_ENTRIES_PER_CALL_MAX).map((group) =>
      this.flushScript([group[0]!.key], ...group.flatMap((entry) => entry.argv)),
    );
    this.flushing = Promise.all(calls)
      .then(
        () => undefined,
        (error: Error) => this.onError(error),
      )
      .finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  /** Stops the flush timer and writes what is left (on shutdown, after the worker stopped). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.flushing;
    await this.flush();
  }

  async read(webhookId: string, nowMs: number): Promise<EndpointStats> {
    const k = this.keys.endpointStats;
    const layout = statsLayout(nowMs);
    // Every key shares the webhook's hash tag: the reads go out together, to one server.
    const [slots, quarters, last] = await Promise.all([
      Promise.all(layout.slots.map((slot) => this.redis.hgetall(k.slot(webhookId, slot)))),
      Promise.all(layout.quarters.map((quarter) => this.redis.hgetall(k.quarter(webhookId, quarter)))),
      this.redis.get(k.last(webhookId)),
    ]);
    const firstSlot = layout.slots[0]!;
    const minutes = layout.minutes.map((minute) => {
      const hash = slots[slotOfMinute(minute) - firstSlot] ?? {};
      const m = minute % SLOT_MINUTES;
      return { atMs: minute * MINUTE_MS, delivered: Number(hash[`${m}d`] ?? 0), failed: Number(hash[`${m}f`] ?? 0) };
    });
    // The current minute is still filling up: the last full one is the one before it.
    const lastFull = minutes.at(-2)!;
    const hourBuckets = emptyBuckets();
    for (const hash of slots) addBuckets(hourBuckets, hash);
    const dayBuckets = emptyBuckets();
    let dayDelivered = 0;
    let dayFailed = 0;
    const firstQuarter = layout.quarters[0]!;
    for (const hour of layout.hours) {
      const hash = quarters[quarterOfHour(hour) - firstQuarter] ?? {};
      const h = hour % QUARTER_HOURS;
      addBuckets(dayBuckets, hash, String(h));
      dayDelivered += Number(hash[`${h}d`] ?? 0);
      dayFailed += Number(hash[`${h}f`] ?? 0);
    }
    return {
      hour: windowOf(
        minutes.reduce((sum, m) => sum + m.delivered, 0),
        minutes.reduce((sum, m) => sum + m.failed, 0),
        hourBuckets,
      ),
      day: windowOf(dayDelivered, dayFailed, dayBuckets),
      minutes,
      sendRatePerSecond: (lastFull.delivered + lastFull.failed) / 60,
      last: parseLast(last),
    };
  }
}

/** The stored newest attempt, `<startedAtMs>|<outcome>|<status>|<durationMs>`. */
function parseLast(text: string | null): EndpointStats['last'] {
  if (text === null) return undefined;
  const [atMs = '', outcome = '', status = '', durationMs = ''] = text.split('|');
  return {
    atMs: Number(atMs),
    outcome,
    statusCode: status === '' ? undefined : Number(status),
    durationMs: Number(durationMs),
  };
}
