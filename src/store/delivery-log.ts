import type { AttemptRecord, DeliverJob, DeliveryStatus, SentRequest } from '../domain/delivery.js';
import { DEFAULT_RETENTION_MS } from './event-log.js';
import type { RedisKeys } from './keys.js';
import { slotGroups, type Redis } from './redis.js';
import { defineScriptFile, type ScriptArg, type ScriptCall } from './scripts.js';
import type { JournalRow } from './attempt-journal.js';
import { LruMap } from '../lib/lru-map.js';
import { runsOf, sortedBy } from '../lib/chunks.js';

export interface DeliverySummary {
  deliveryId: string;
  eventId: string;
  eventType: string;
  webhookId: string;
  vendorId: string;
  status: DeliveryStatus;
  attempts: number;
  lastOutcome: string | undefined;
  lastStatusCode: number | undefined;
  acceptedAtMs: number;
  updatedAtMs: number;
  nextAttemptAtMs: number | undefined;
  replayOf: string | undefined;
}

export interface DeliveryLogOptions {
  /**
   * How long an attempt's record may wait for others to be written with it (one script and one
   * write for many attempts); 0: until the current turn of the event loop ends.
   */
  recordFlushMs: number;
  /** How long a finished delivery and its attempts are kept. */
  retentionMs: number;
  /** How long a dead letter is kept for replay. */
  deadLetterRetentionMs: number;
  /** Recent deliveries kept per webhook. */
  recentPerWebhook: number;
  /**
   * How long a finished record's status (a small tombstone) lives on after it falls off the recent
   * list. A batch that runs again after its worker died reads it to skip what was already
   * delivered, so it must outlive the lock expiry and the wait for another worker.
   */
  fallenOffGraceMs: number;
}

const DEFAULT_DELIVERY_LOG_OPTIONS: DeliveryLogOptions = {
  recordFlushMs: 1,
  retentionMs: DEFAULT_RETENTION_MS,
  deadLetterRetentionMs: DEFAULT_RETENTION_MS,
  recentPerWebhook: 1_000,
  fallenOffGraceMs: 5 * 60_000,
};

/** What the worker writes after each attempt. */
export interface AttemptWrite {
  job: DeliverJob;
  attempt: AttemptRecord;
  status: Exclude<DeliveryStatus, 'pending' | 'replayed'>;
  nextAttemptAtMs?: number;
  /**
   * The delivery has no record and nothing else will read its progress before the journal is
   * projected (a fresh batch's first attempt, not handed off): delivered, it may go to the journal
   * instead of a record of its own (see RedisDeliveryLog.journalTo).
   */
  journal?: boolean;
}

/** Where first attempts delivered without a record go: appended as one batch, projected later. */
export interface AttemptJournal {
  append(rows: readonly JournalRow[]): Promise<void>;
}

/** The worker's side of the log. */
export interface DeliveryRecorder {
  /** Records an attempt (one round trip); returns when the webhook's current run of failures began. */
  recordAttempt(write: AttemptWrite): Promise<{ failingSinceMs: number | undefined }>;
  /** Records a delivery dropped without an attempt (its webhook was deleted). */
  recordDropped(job: DeliverJob, nowMs: number): Promise<void>;
  /** Where each delivery stands (undefined: no record), for a batch re-run or a single delivery job. */
  progressOf(refs: readonly { webhookId: string; deliveryId: string }[]): Promise<(DeliveryProgress | undefined)[]>;
  /**
   * Records that deliveries were held back (not attempted) until `nextAttemptAtMs`, so the API shows
   * when they will really be tried; a delivery with no record yet gets a `pending` one.
   */
  recordDeferred(deferrals: readonly DeferralWrite[]): Promise<void>;
}

/** A delivery held back without an attempt. */
export interface DeferralWrite {
  job: DeliverJob;
  /** When it will be tried. */
  nextAttemptAtMs: number;
  /** When the retry schedule made it due (kept from the first deferral of this attempt). */
  dueAtMs: number;
  /**
   * Write only when the delivery has no record yet: a batch hands off a delivery whose attempt is
   * still in flight, and that attempt's own record, if it lands first, is the truth. (A record there
   * already only forgets its parking: the hand-off's single job holds the delivery now.)
   */
  ifNoRecord?: true;
  /** The parked batch job that holds the delivery until it is tried (absent: its own single job does). */
  parkedIn?: string;
}

/** Which recent deliveries a page holds. */
export interface DeliveryQuery {
  limit: number;
  status?: DeliveryStatus;
  eventType?: string;
  /** Accepted at or after. */
  sinceMs?: number;
  /** Accepted at or before. */
  untilMs?: number;
  /** Continue after this delivery (a page's `next`). */
  after?: DeliveryCursor;
}

export interface DeliveryCursor {
  acceptedAtMs: number;
  deliveryId: string;
}

export interface DeliveryPage {
  deliveries: DeliverySummary[];
  next: DeliveryCursor | undefined;
}

/** What the operator views show of a webhook's deliveries. */
export interface WebhookDeliveryHealth {
  /** When its current run of failed attempts began; undefined after a success. */
  failingSinceMs: number | undefined;
  deadLetters: number;
  /** The newest outcome among its last deliveries. */
  last: { outcome: string; statusCode: number | undefined; atMs: number } | undefined;
}

/** The admin side: what vendors read and replay. */
export interface DeliveryHistory {
  recent(webhookId: string, limit: number): Promise<DeliverySummary[]>;
  /** A page of the recent deliveries, newest first, filtered; `next` continues after its last one. */
  page(webhookId: string, query: DeliveryQuery): Promise<DeliveryPage>;
  /** Per webhook: failure run, dead-letter count and last outcome (operator views). */
  health(webhookIds: readonly string[]): Promise<WebhookDeliveryHealth[]>;
  get(
    webhookId: string,
    deliveryId: string,
  ): Promise<{ delivery: DeliverySummary; attempts: AttemptRecord[]; body: string | undefined } | undefined>;
  deadLetters(webhookId: string, limit: number): Promise<DeliverySummary[]>;
  /**
   * The body each delivery was sent with, where one is still kept (see eventBodies below); in
   * input order, undefined where none is.
   */
  eventBodies(deliveries: readonly DeliverySummary[]): Promise<(string | undefined)[]>;
  /** How many dead letters the webhook has: the ones a bulk replay would replay now. */
  deadLetterCount(webhookId: string): Promise<number>;
  /** Dead-letter ids oldest first, after `afterScore` (for paging through a bulk replay). */
  deadLetterIds(webhookId: string, limit: number): Promise<string[]>;
  /** Takes a dead letter out of the dead-letter set once its replay is queued; false if it was not there. */
  markReplayed(webhookId: string, deliveryId: string, nowMs: number): Promise<boolean>;
  /** Takes an id out of the dead-letter set without touching its record (one whose record expired). */
  forgetDeadLetter(webhookId: string, deliveryId: string): Promise<void>;
  /**
   * Gives deliveries just queued by hand (replays, test events) a pending record, unless one exists
   * already (a worker may have recorded the first attempt meanwhile), so the id the API answers can
   * be read at once.
   */
  recordQueued(jobs: readonly DeliverJob[]): Promise<void>;
}

/** A delivery's identity as the record scripts take it: id, event id and type, webhook, vendor, accepted time, replayed dead letter. */
const identityArgs = (job: DeliverJob): ScriptArg[] => [
  job.deliveryId,
  job.eventId,
  job.eventType,
  job.webhookId,
  job.vendorId,
  job.acceptedAtMs,
  job.replayOf ?? '',
];

const num = (text: string | null | undefined) => (text == null || text === '' ? undefined : Number(text));

/** The due time in a record's `dueAt` (`<attempt>:<ms>`) when it belongs to `attempt`; a stale one says nothing. */
function dueAtFor(dueAt: string | null | undefined, attempt: number): number | undefined {
  if (dueAt == null) return undefined;
  const [forAttempt, ms] = dueAt.split(':');
  return Number(forAttempt) === attempt ? num(ms) : undefined;
}

function toSummary(fields: Record<string, string>): DeliverySummary | undefined {
  if (!fields.deliveryId) return undefined;
  return {
    deliveryId: fields.deliveryId,
    eventId: fields.eventId ?? '',
    eventType: fields.eventType ?? '',
    webhookId: fields.webhookId ?? '',
    vendorId: fields.vendorId ?? '',
    status: (fields.status ?? 'pending') as DeliveryStatus,
    attempts: num(fields.attempts) ?? 0,
    lastOutcome: fields.lastOutcome || undefined,
    lastStatusCode: num(fields.lastStatusCode),
    acceptedAtMs: num(fields.acceptedAtMs) ?? 0,
    updatedAtMs: num(fields.updatedAtMs) ?? 0,
    nextAttemptAtMs: num(fields.nextAttemptAtMs),
    replayOf: fields.replayOf || undefined,
  };
}

/**
 * A first attempt delivered, kept without a record of its own (the journal's projection writes it to
 * the event log's status hash, which the event feed reads its status from): a header line,
 * `delivered\t<event type>\t<status code>\t<at ms>`, that the scripts read without decoding
 * JSON, then the rest of the record and its attempt. The rest is positional and tab-separated
 * (COMPACT_FIELDS, after the format's tag `2`), with the attempt's rarer facts (a response excerpt,
 * an error, trace ids, header names, an auth scheme) as JSON in its last field, empty when there are
 * none: about 110 bytes for what JSON of the whole record took about 290, written twice on the hot
 * path (the journal, its projection) and kept for the retention period. A record whose positional
 * values hold a tab or a line break, or that sent no request or kept no answer, is written in the first format, JSON
 * of `{ e, v, c, r }`, which is still read (so is every record written before).
 */
function compactDelivered(write: AttemptWrite): string {
  const { job, attempt } = write;
  const { sent } = attempt;
  const header = `delivered\t${job.eventType}\t${attempt.statusCode ?? ''}\t${attempt.atMs}\n`;
  if (
    sent !== undefined &&
    attempt.outcome === 'delivered' &&
    attempt.responseSnippet !== undefined &&
    plain(job.eventId) &&
    plain(job.vendorId) &&
    plain(sent.host) &&
    plain(sent.userAgent)
  ) {
    // The rarer facts, when there are any (checked by name first: most attempts have none, and
    // building the object for each would be garbage on the hot path).
    let tail = '';
    if (hasOtherThan(attempt, ATTEMPT_POSITIONAL) || hasOtherThan(sent, SENT_POSITIONAL)) {
      const { attempt: _n, atMs: _at, outcome: _o, statusCode: _c, durationMs: _d, sent: _s, ...rarer } = attempt;
      const { host: _h, bodyBytes: _b, signatures: _g, userAgent: _u, ...rarerSent } = sent;
      const extra = { ...rarer, ...(Object.keys(rarerSent).length > 0 ? { sent: rarerSent } : {}) };
      if (extra.responseSnippet === '') delete extra.responseSnippet;
      tail = JSON.stringify(extra);
    }
    return `${header}${COMPACT_FORMAT}\t${job.eventId}\t${job.vendorId}\t${job.acceptedAtMs}\t${attempt.attempt}\t${attempt.durationMs}\t${sent.host}\t${sent.bodyBytes}\t${sent.signatures}\t${sent.userAgent}\t${tail}`;
  }
  return `${header}${JSON.stringify({ e: job.eventId, v: job.vendorId, c: job.acceptedAtMs, r: attempt })}`;
}

/** Whether a positional value holds neither a tab nor a line break. */
const plain = (value: string) => !value.includes('\t') && !value.includes('\n');

/** What the positional form keeps of an attempt (an empty response excerpt is its default) and of its request. */
const ATTEMPT_POSITIONAL = new Set(['attempt', 'atMs', 'outcome', 'statusCode', 'durationMs', 'sent']);
const SENT_POSITIONAL = new Set(['host', 'bodyBytes', 'signatures', 'userAgent']);

/** Whether `value` has a defined property outside `names` (a non-empty response excerpt counts). */
function hasOtherThan(value: object, names: ReadonlySet<string>): boolean {
  for (const key in value) {
    const field = (value as Record<string, unknown>)[key];
    if (names.has(key) || field === undefined || (key === 'responseSnippet' && field === '')) continue;
    return true;
  }
  return false;
}

/** The tag that starts the rest of a positional compact record (see compactDelivered). */
const COMPACT_FORMAT = '2';
/** The rest's fields after the tag, in order. */
const COMPACT_FIELDS = 10;

/** The rest of a compact record, in either format (see compactDelivered); undefined when malformed. */
function compactRest(
  statusCode: number | undefined,
  atMs: number,
  rest: string,
): { e: string; v: string; c: number; r: AttemptRecord } | undefined {
  if (rest.startsWith('{')) {
    try {
      return JSON.parse(rest) as { e: string; v: string; c: number; r: AttemptRecord };
    } catch {
      return undefined;
    }
  }
  const fields = rest.split('\t');
  if (fields.length !== COMPACT_FIELDS + 1 || fields[0] !== COMPACT_FORMAT) return undefined;
  const [, e, v, c, attempt, durationMs, host, bodyBytes, signatures, userAgent, tail = ''] = fields;
  let extra: { sent?: Partial<SentRequest> } & Partial<AttemptRecord> = {};
  if (tail !== '')
    try {
      extra = JSON.parse(tail) as typeof extra;
    } catch {
      return undefined;
    }
  const { sent: rarerSent, ...rarer } = extra;
  return {
    e: e!,
    v: v!,
    c: Number(c),
    r: {
      attempt: Number(attempt),
      atMs,
      outcome: 'delivered',
      ...(statusCode === undefined ? {} : { statusCode }),
      durationMs: Number(durationMs),
      responseSnippet: '',
      ...rarer,
      sent: {
        host: host!,
        bodyBytes: Number(bodyBytes),
        signatures: Number(signatures),
        userAgent: userAgent!,
        ...rarerSent,
      },
    },
  };
}

/** A compact delivered record (see compactDelivered) read back; undefined for a plain status or a malformed value. */
function fromCompact(
  webhookId: string,
  deliveryId: string,
  value: string | null | undefined,
): { delivery: DeliverySummary; attempt: AttemptRecord } | undefined {
  const newline = value?.indexOf('\n') ?? -1;
  if (value == null || newline < 0) return undefined;
  const [status, eventType, code, at] = value.slice(0, newline).split('\t');
  const rest = compactRest(code ? Number(code) : undefined, Number(at), value.slice(newline + 1));
  if (rest === undefined) return undefined;
  const attempt = rest.r;
  return {
    delivery: {
      deliveryId,
      eventId: rest.e,
      eventType: eventType ?? '',
      webhookId,
      vendorId: rest.v,
      status: (status ?? 'delivered') as DeliveryStatus,
      attempts: attempt.attempt,
      lastOutcome: attempt.outcome,
      lastStatusCode: attempt.statusCode,
      acceptedAtMs: rest.c,
      updatedAtMs: attempt.atMs,
      nextAttemptAtMs: undefined,
      replayOf: undefined,
    },
    attempt,
  };
}

/**
 * Which holds a delivery: its record, unless it has none or only the pending one a deferral or a
 * hand-off left before its first attempt, when a compact record exists (the attempt was journaled).
 */
const recordWins = (record: DeliverySummary | undefined, compact: unknown) =>
  record !== undefined && (compact === undefined || record.status !== 'pending' || record.attempts > 0);

/** Where a delivery stands, as a batch re-run after a crash or a single delivery job needs to know. */
export interface DeliveryProgress {
  status: DeliveryStatus;
  /** While pending: the parked batch job that holds it (absent: its single job does, or none yet). */
  parkedIn?: string;
  attempts: number;
  /** When the next attempt will be made (a deferral moves it). */
  nextAttemptAtMs: number | undefined;
  /** When the retry schedule made the next attempt due; undefined when no deferral moved it. */
  dueAtMs: number | undefined;
}

/** Records one forgetBefore call removes at most (of each set). */
const FORGET_PER_CALL_MAX = 500;

/** Overflow ids one attempt removes from a recent list at most, so a single call's work stays bounded. */
const TRIM_IDS_MAX = 64;
/** Journaled deliveries a process remembers for its own re-runs (see RedisDeliveryLog.journaled): a few MB at most. */
const JOURNALED_KEPT = 20_000;
/** Attempts recorded by one script call at most; a full batch is written at once. */
const RECORDS_PER_CALL_MAX = 128;

/**
 * Every delivery's record and attempts, kept under the webhook's hash tag so one attempt is one
 * script call (Redis Cluster safe), with bounded retention.
 */
export class RedisDeliveryLog implements DeliveryRecorder, DeliveryHistory {
  private readonly options: DeliveryLogOptions;
  /** Returns, per attempt, when (ms, as text) its webhook's current run of failures began; null once delivered. */
  private readonly recordAttemptsScript: ScriptCall<[routing: string], ScriptArg[], (string | null)[]>;
  private readonly recordDeferredScript: ScriptCall<[routing: string], ScriptArg[], number>;
  private readonly recordQueuedScript: ScriptCall<[routing: string], ScriptArg[], number>;
  private readonly forgetScript: ScriptCall<[recent: string, dead: string], ScriptArg[], number>;
  /** A page of the recent list (see lua/delivery-log-page.lua). */
  private readonly pageScript: ScriptCall<
    [recentKey: string, statuses: string],
    [
      recordKeyPrefix: string,
      status: string,
      eventType: string,
      maxScore: string,
      minScore: string,
      afterId: string,
      limit: number,
    ],
    (string | number)[]
  >;
  private readonly projectScript: ScriptCall<[routing: string], ScriptArg[], number>;
  private readonly healthScript: ScriptCall<
    [failingSince: string, dead: string, recent: string, statuses: string],
    [recordKeyPrefix: string],
    (string | number)[]
  >;
  // The script's fixed arguments, as text once rather than on every attempt.
  private readonly retentionMsArg: string;
  private readonly deadLetterRetentionMsArg: string;
  private readonly recentPerWebhookArg: string;
  private readonly trimIdsMaxArg = String(TRIM_IDS_MAX);
  private readonly fallenOffGraceMsArg: string;
  /** Attempts waiting to be written together, and the timer that writes them. */
  private pending: { write: AttemptWrite; settle: (failingSince: string | null | Error) => void }[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  /** Where delivered first attempts go instead of records (see journalTo); absent: every attempt gets a record. */
  private journal: AttemptJournal | undefined;
  /**
   * Webhooks whose last recorded attempt here failed: a delivery to one of them gets a record, whose
   * write ends the failure run at once (the journal's projection would end it only later).
   */
  private readonly failing = new Set<string>();
  /**
   * Deliveries this process journaled lately (their compact records): a batch that runs again in this
   * process (storage failed) reads them here, as the journal may not be projected yet.
   */
  private readonly journaled = new LruMap<string, string>(JOURNALED_KEPT);

  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    options: Partial<DeliveryLogOptions> = {},
  ) {
    this.options = { ...DEFAULT_DELIVERY_LOG_OPTIONS, ...options };
    this.recordAttemptsScript = defineScriptFile(redis, 'delivery-log-record-attempts', 1);
    this.recordDeferredScript = defineScriptFile(redis, 'delivery-log-record-deferred', 1);
    this.recordQueuedScript = defineScriptFile(redis, 'delivery-log-record-queued', 1);
    this.pageScript = defineScriptFile(redis, 'delivery-log-page', 2);
    this.healthScript = defineScriptFile(redis, 'delivery-log-health', 4);
    this.projectScript = defineScriptFile(redis, 'delivery-log-project', 1);
    this.forgetScript = defineScriptFile(redis, 'delivery-log-forget-before', 2);
    this.retentionMsArg = String(this.options.retentionMs);
    this.deadLetterRetentionMsArg = String(this.options.deadLetterRetentionMs);
    this.recentPerWebhookArg = String(this.options.recentPerWebhook);
    this.fallenOffGraceMsArg = String(this.options.fallenOffGraceMs);
  }

  /**
   * From now on, a first attempt delivered with no record of its own (AttemptWrite.journal) is
   * appended to `journal`, in one command with the others of its flush, instead of a record: no
   * per-delivery key is written on the hot path. The journal's projection (`project`) writes it
   * later as a compact record in the event log's status hash and lists it in the recent list, so
   * every read shows it once projected. Only while the event log is kept: the compact record lives
   * and is trimmed with the event's log entry.
   */
  journalTo(journal: AttemptJournal): void {
    this.journal = journal;
  }

  /** Writes journaled attempts into the log's shape (the journal's projection; idempotent). */
  async project(rows: readonly JournalRow[]): Promise<void> {
    const k = this.keys.deliveries;
    // A webhook's attempts side by side (the sort is stable), so that a call holds all of them and
    // pays its per-webhook commands (the recent list, the TTLs, the trim, the failure run) once.
    const webhookOf = (row: JournalRow) => row.webhookId;
    await Promise.all(
      slotGroups(this.redis, sortedBy(rows, webhookOf), (row) => k.ofWebhook(row.webhookId), RECORDS_PER_CALL_MAX).map(
        (group) => {
          const args: ScriptArg[] = [];
          for (const [webhookId, list] of runsOf(group, webhookOf)) {
            args.push(
              k.ofWebhook(webhookId),
              k.logStatuses(webhookId),
              k.logBodies(webhookId),
              k.failingSince(webhookId),
              k.record(webhookId, ''),
              list.length,
            );
            for (const row of list) args.push(row.deliveryId, row.acceptedAtMs, row.atMs, row.value);
          }
          return this.projectScript(
            [k.ofWebhook(group[0]!.webhookId)],
            this.deadLetterRetentionMsArg,
            this.recentPerWebhookArg,
            this.trimIdsMaxArg,
            this.fallenOffGraceMsArg,
            ...args,
          );
        },
      ),
    );
  }

  /**
   * Records an attempt. Attempts recorded within `recordFlushMs` of each other are written together:
   * one script call per Redis Cluster slot (one in all on a single server), so a busy worker makes
   * one round trip for many attempts instead of one each. Resolves once this attempt is stored.
   */
  recordAttempt(write: AttemptWrite): Promise<{ failingSinceMs: number | undefined }> {
    return new Promise((resolve, reject) => {
      this.pending.push({
        write,
        settle: (since) =>
          since instanceof Error
            ? reject(since)
            : resolve({ failingSinceMs: since === null ? undefined : Number(since) }),
      });
      if (this.pending.length >= RECORDS_PER_CALL_MAX) this.flush();
      else this.flushTimer ??= setTimeout(() => this.flush(), this.options.recordFlushMs);
    });
  }

  /** Writes the waiting attempts: one script call per slot group and RECORDS_PER_CALL_MAX attempts. */
  private flush(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const all = this.pending;
    this.pending = [];
    const journaled: typeof all = [];
    const batch: typeof all = [];
    for (const entry of all) (this.journal !== undefined && this.journals(entry.write) ? journaled : batch).push(entry);
    if (journaled.length > 0)
      this.journal!.append(
        journaled.map(({ write }) => ({
          webhookId: write.job.webhookId,
          deliveryId: write.job.deliveryId,
          acceptedAtMs: write.job.acceptedAtMs,
          atMs: write.attempt.atMs,
          value: compactDelivered(write),
        })),
      ).then(
        () =>
          journaled.forEach(({ write, settle }) => {
            this.journaled.set(write.job.deliveryId, 'delivered');
            settle(null);
          }),
        (error: unknown) => {
          const failure = error instanceof Error ? error : new Error(String(error));
          for (const { settle } of journaled) settle(failure);
        },
      );
    const k = this.keys.deliveries;
    for (const entries of slotGroups(
      this.redis,
      batch,
      ({ write }) => k.ofWebhook(write.job.webhookId),
      RECORDS_PER_CALL_MAX,
    )) {
      const webhookIndex = new Map<string, number>();
      const webhookArgs: ScriptArg[] = [];
      const recordArgs: ScriptArg[] = [];
      for (const { write } of entries) {
        const { job, attempt, status } = write;
        let index = webhookIndex.get(job.webhookId);
        if (index === undefined) {
          index = webhookIndex.size + 1;
          webhookIndex.set(job.webhookId, index);
          webhookArgs.push(
            k.ofWebhook(job.webhookId),
            k.dead(job.webhookId),
            k.failingSince(job.webhookId),
            k.record(job.webhookId, ''),
            k.logBodies(job.webhookId),
            k.logStatuses(job.webhookId),
          );
        }
        // The delivery's identity is written with its first attempt only; later ones send it empty.
        const first = attempt.attempt === 1;
        recordArgs.push(
          index,
          status,
          attempt.attempt,
          attempt.outcome,
          attempt.statusCode ?? '',
          attempt.atMs,
          write.nextAttemptAtMs ?? '',
          JSON.stringify(attempt),
          job.deliveryId,
          job.acceptedAtMs,
          status === 'dead' ? job.body : '',
          first ? job.eventId : '',
          first ? job.eventType : '',
          first ? job.webhookId : '',
          first ? job.vendorId : '',
          first ? (job.replayOf ?? '') : '',
          status === 'delivered' || status === 'dead' ? (job.replayOf ?? job.deliveryId) : '',
        );
      }
      this.recordAttemptsScript(
        [webhookArgs[0] as string],
        this.retentionMsArg,
        this.deadLetterRetentionMsArg,
        this.recentPerWebhookArg,
        this.trimIdsMaxArg,
        this.fallenOffGraceMsArg,
        webhookIndex.size,
        ...webhookArgs,
        ...recordArgs,
      ).then(
        (replies) =>
          entries.forEach(({ write, settle }, i) => {
            const since = replies[i] ?? null;
            if (since === null) this.failing.delete(write.job.webhookId);
            else this.failing.add(write.job.webhookId);
            settle(since);
          }),
        (error: unknown) => {
          const failure = error instanceof Error ? error : new Error(String(error));
          for (const { settle } of entries) settle(failure);
        },
      );
    }
  }

  /** Whether an attempt goes to the journal instead of a record (see journalTo). */
  private journals({ journal, status, attempt, job }: AttemptWrite): boolean {
    return (
      journal === true &&
      status === 'delivered' &&
      attempt.attempt === 1 &&
      job.replayOf === undefined &&
      !this.failing.has(job.webhookId)
    );
  }

  async recordDropped(job: DeliverJob, nowMs: number): Promise<void> {
    const recordKey = this.keys.deliveries.record(job.webhookId, job.deliveryId);
    await this.redis
      .multi()
      .hset(recordKey, {
        deliveryId: job.deliveryId,
        eventId: job.eventId,
        eventType: job.eventType,
        webhookId: job.webhookId,
        status: 'dropped',
        acceptedAtMs: job.acceptedAtMs,
        updatedAtMs: nowMs,
      })
      .pexpire(recordKey, this.options.retentionMs)
      .exec();
  }

  async recordDeferred(deferrals: readonly DeferralWrite[]): Promise<void> {
    const k = this.keys.deliveries;
    await this.writePerSlot(
      deferrals,
      this.recordDeferredScript,
      ({ job, nextAttemptAtMs, dueAtMs, ifNoRecord, parkedIn }) => [
        k.record(job.webhookId, job.deliveryId),
        k.ofWebhook(job.webhookId),
        Math.round(nextAttemptAtMs),
        Math.round(dueAtMs),
        ...identityArgs(job),
        ifNoRecord ? '1' : '',
        parkedIn ?? '',
      ],
    );
  }

  async recordQueued(jobs: readonly DeliverJob[]): Promise<void> {
    const k = this.keys.deliveries;
    await this.writePerSlot(
      jobs.map((job) => ({ job })),
      this.recordQueuedScript,
      ({ job }) => [k.record(job.webhookId, job.deliveryId), k.ofWebhook(job.webhookId), ...identityArgs(job)],
    );
  }

  /** One call of `script` per slot group of `writes` (by webhook), with the retention arguments and each write's own. */
  private async writePerSlot<W extends { job: DeliverJob }>(
    writes: readonly W[],
    script: ScriptCall<[routing: string], ScriptArg[], number>,
    argsOf: (write: W) => ScriptArg[],
  ): Promise<void> {
    const k = this.keys.deliveries;
    await Promise.all(
      slotGroups(this.redis, writes, ({ job }) => k.ofWebhook(job.webhookId), RECORDS_PER_CALL_MAX).map((chunk) =>
        script(
          [k.ofWebhook(chunk[0]!.job.webhookId)],
          this.retentionMsArg,
          this.deadLetterRetentionMsArg,
          ...chunk.flatMap(argsOf),
        ),
      ),
    );
  }

  /**
   * Each ref's status, attempts and next attempt time (`undefined` where no record exists), in input
   * order. One HMGET per ref, issued together: the connection pipelines them, and on a Redis Cluster
   * each goes to its own webhook's slot.
   */
  async progressOf(
    refs: readonly { webhookId: string; deliveryId: string }[],
  ): Promise<(DeliveryProgress | undefined)[]> {
    const k = this.keys.deliveries;
    return Promise.all(
      refs.map(({ webhookId, deliveryId }) =>
        Promise.all([
          this.redis.hmget(
            k.record(webhookId, deliveryId),
            'status',
            'attempts',
            'nextAttemptAtMs',
            'dueAt',
            'parkedIn',
          ),
          this.redis.hget(k.logStatuses(webhookId), deliveryId),
        ]).then(([[status, attempts, nextAttemptAtMs, dueAt, parkedIn], logged]): DeliveryProgress | undefined => {
          const made = num(attempts) ?? 0;
          if (
            (logged?.startsWith('delivered\t') || this.journaled.get(deliveryId) !== undefined) &&
            (status == null || (status === 'pending' && made === 0))
          )
            return { status: 'delivered', attempts: 1, nextAttemptAtMs: undefined, dueAtMs: undefined };
          if (status == null) return undefined;
          return {
            status: status as DeliveryStatus,
            ...(status === 'pending' && parkedIn ? { parkedIn } : {}),
            attempts: made,
            nextAttemptAtMs: num(nextAttemptAtMs),
            dueAtMs: dueAtFor(dueAt, made + 1),
          };
        }),
      ),
    );
  }

  async recent(webhookId: string, limit: number): Promise<DeliverySummary[]> {
    const ids = await this.redis.zrevrange(this.keys.deliveries.ofWebhook(webhookId), 0, limit - 1);
    return this.summaries(webhookId, ids);
  }

  async page(webhookId: string, query: DeliveryQuery): Promise<DeliveryPage> {
    const k = this.keys.deliveries;
    const maxScore =
      query.after !== undefined
        ? String(query.after.acceptedAtMs)
        : query.untilMs !== undefined
          ? String(query.untilMs)
          : '+inf';
    const [more, lastScore, ...ids] = await this.pageScript(
      [k.ofWebhook(webhookId), k.logStatuses(webhookId)],
      k.record(webhookId, ''),
      query.status ?? '',
      query.eventType ?? '',
      maxScore,
      query.sinceMs === undefined ? '-inf' : String(query.sinceMs),
      query.after?.deliveryId ?? '',
      query.limit,
    );
    const deliveries = await this.summaries(webhookId, ids.map(String));
    const lastId = ids.at(-1);
    return {
      deliveries,
      next:
        Number(more) === 1 && lastId !== undefined
          ? { acceptedAtMs: Number(lastScore), deliveryId: String(lastId) }
          : undefined,
    };
  }

  async health(webhookIds: readonly string[]): Promise<WebhookDeliveryHealth[]> {
    const k = this.keys.deliveries;
    const rows = await Promise.all(
      webhookIds.map((id) =>
        this.healthScript([k.failingSince(id), k.dead(id), k.ofWebhook(id), k.logStatuses(id)], k.record(id, '')),
      ),
    );
    return rows.map(([since, dead, outcome, statusCode, atMs]) => ({
      failingSinceMs: num(since === undefined ? undefined : String(since)),
      deadLetters: Number(dead ?? 0),
      last:
        outcome === undefined
          ? undefined
          : { outcome: String(outcome), statusCode: num(String(statusCode ?? '')), atMs: num(String(atMs ?? '')) ?? 0 },
    }));
  }

  async get(
    webhookId: string,
    deliveryId: string,
  ): Promise<{ delivery: DeliverySummary; attempts: AttemptRecord[]; body: string | undefined } | undefined> {
    const k = this.keys.deliveries;
    const [fields, logged] = await Promise.all([
      this.redis.hgetall(k.record(webhookId, deliveryId)),
      this.redis.hget(k.logStatuses(webhookId), deliveryId),
    ]);
    const delivery = toSummary(fields);
    const compact = fromCompact(webhookId, deliveryId, logged);
    if (compact !== undefined && !recordWins(delivery, compact))
      return { delivery: compact.delivery, attempts: [compact.attempt], body: undefined };
    if (!delivery) return undefined;
    const attempts = Object.entries(fields)
      .filter(([name]) => name.startsWith('attempt:'))
      .map(([, json]) => JSON.parse(json) as AttemptRecord)
      .sort((a, b) => a.attempt - b.attempt);
    return { delivery, attempts, body: fields.body };
  }

  async deadLetters(webhookId: string, limit: number): Promise<DeliverySummary[]> {
    const ids = await this.redis.zrevrange(this.keys.deliveries.dead(webhookId), 0, limit - 1);
    return this.summaries(webhookId, ids);
  }

  /**
   * The body each delivery was sent with, where one is still kept: the webhook's event log holds it
   * under the delivery ingest made (for a replay, the one it replays); a dead letter's record holds
   * its own, and a replayed dead letter's still does. Undefined for a test event, an erased event,
   * one past the retention, or with the event log turned off a delivery that never died. One HGET
   * per delivery (pipelined, each to its webhook's slot), and more only for those the log lacks.
   */
  async eventBodies(deliveries: readonly DeliverySummary[]): Promise<(string | undefined)[]> {
    const k = this.keys.deliveries;
    const bodyOf = (webhookId: string, deliveryId: string) => this.redis.hget(k.record(webhookId, deliveryId), 'body');
    const logged = await Promise.all(
      deliveries.map((d) => this.redis.hget(k.logBodies(d.webhookId), d.replayOf ?? d.deliveryId)),
    );
    return Promise.all(
      deliveries.map(
        async (d, i) =>
          logged[i] ??
          (await bodyOf(d.webhookId, d.deliveryId)) ??
          (d.replayOf === undefined ? null : await bodyOf(d.webhookId, d.replayOf)) ??
          undefined,
      ),
    );
  }

  async deadLetterCount(webhookId: string): Promise<number> {
    return this.redis.zcard(this.keys.deliveries.dead(webhookId));
  }

  async deadLetterIds(webhookId: string, limit: number): Promise<string[]> {
    return this.redis.zrange(this.keys.deliveries.dead(webhookId), 0, limit - 1);
  }

  async markReplayed(webhookId: string, deliveryId: string, nowMs: number): Promise<boolean> {
    const results = await this.redis
      .multi()
      .zrem(this.keys.deliveries.dead(webhookId), deliveryId)
      .hset(this.keys.deliveries.record(webhookId, deliveryId), { status: 'replayed', updatedAtMs: nowMs })
      .exec();
    return results?.[0]?.[1] === 1;
  }

  async forgetDeadLetter(webhookId: string, deliveryId: string): Promise<void> {
    await this.redis.zrem(this.keys.deliveries.dead(webhookId), deliveryId);
  }

  /**
   * Removes the webhook's finished deliveries accepted before `cutoffMs`, and its dead letters that
   * died before it, records and all (a webhook's own retention, shorter than the records' TTL);
   * deliveries still being tried stay. Returns how many records went.
   */
  async forgetBefore(webhookId: string, cutoffMs: number): Promise<number> {
    const k = this.keys.deliveries;
    let removed = 0;
    // Bounded: each call removes up to FORGET_PER_CALL_MAX and the sets are capped.
    for (let calls = 0; calls < 1_000; calls += 1) {
      const n = Number(
        await this.forgetScript(
          [k.ofWebhook(webhookId), k.dead(webhookId)],
          k.record(webhookId, ''),
          Math.floor(cutoffMs),
          FORGET_PER_CALL_MAX,
        ),
      );
      removed += n;
      if (n < FORGET_PER_CALL_MAX) return removed;
    }
    return removed;
  }

  private async summaries(webhookId: string, ids: string[]): Promise<DeliverySummary[]> {
    if (ids.length === 0) return [];
    const summaryFields = [
      'deliveryId',
      'eventId',
      'eventType',
      'webhookId',
      'vendorId',
      'status',
      'attempts',
      'lastOutcome',
      'lastStatusCode',
      'acceptedAtMs',
      'updatedAtMs',
      'nextAttemptAtMs',
      'replayOf',
    ] as const;
    const k = this.keys.deliveries;
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hmget(k.record(webhookId, id), ...summaryFields);
    pipeline.hmget(k.logStatuses(webhookId), ...ids);
    const rows = (await pipeline.exec()) ?? [];
    const logged = (rows.at(-1)?.[1] ?? []) as (string | null)[];
    return ids
      .map((id, n) => {
        const values = (rows[n]?.[1] ?? []) as (string | null)[];
        const record = toSummary(
          Object.fromEntries(summaryFields.flatMap((name, i) => (values[i] == null ? [] : [[name, values[i]]]))),
        );
        const compact = fromCompact(webhookId, id, logged[n]);
        return compact !== undefined && !recordWins(record, compact) ? compact.delivery : record;
      })
      .filter((s): s is DeliverySummary => s !== undefined);
  }
}
