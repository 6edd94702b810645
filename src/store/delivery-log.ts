import type { DeliverJob } from '../delivery/jobs.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

export const DELIVERY_STATUSES = ['pending', 'retrying', 'delivered', 'dead', 'dropped', 'replayed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** One attempt as recorded (and shown to vendors). */
export interface AttemptRecord {
  attempt: number;
  atMs: number;
  /** `delivered`, `http_4xx`, `timeout`, `ssrf_blocked`, … */
  outcome: string;
  statusCode?: number;
  durationMs: number;
  error?: string;
  responseSnippet?: string;
}

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
  /** How long a finished delivery and its attempts are kept. */
  retentionMs: number;
  /** How long a dead letter is kept for replay. */
  deadLetterRetentionMs: number;
  /** Recent deliveries kept per webhook. */
  recentPerWebhook: number;
}

export const DEFAULT_DELIVERY_LOG_OPTIONS: DeliveryLogOptions = {
  retentionMs: 7 * 24 * 3_600_000,
  deadLetterRetentionMs: 30 * 24 * 3_600_000,
  recentPerWebhook: 1_000,
};

/** What the worker writes after each attempt. */
export interface AttemptWrite {
  job: DeliverJob;
  attempt: AttemptRecord;
  status: Exclude<DeliveryStatus, 'pending' | 'replayed'>;
  nextAttemptAtMs?: number;
}

/** The worker's side of the log. */
export interface DeliveryRecorder {
  /** Records an attempt (one round trip); returns when the webhook's current run of failures began. */
  recordAttempt(write: AttemptWrite): Promise<{ failingSinceMs: number | undefined }>;
  /** Records a delivery dropped without an attempt (its webhook was deleted). */
  recordDropped(job: DeliverJob, nowMs: number): Promise<void>;
}

/** The admin side: what vendors read and replay. */
export interface DeliveryHistory {
  recent(webhookId: string, limit: number): Promise<DeliverySummary[]>;
  get(webhookId: string, deliveryId: string): Promise<{ delivery: DeliverySummary; attempts: AttemptRecord[]; body: string | undefined } | undefined>;
  deadLetters(webhookId: string, limit: number): Promise<DeliverySummary[]>;
  /** Dead-letter ids oldest first, after `afterScore` (for paging through a bulk replay). */
  deadLetterIds(webhookId: string, limit: number): Promise<string[]>;
  /** Takes a dead letter out of the dead-letter set once its replay is queued; false if it was not there. */
  markReplayed(webhookId: string, deliveryId: string, nowMs: number): Promise<boolean>;
}

const num = (text: string | undefined) => (text === undefined || text === '' ? undefined : Number(text));

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
 * Every delivery's record and attempts, kept under the webhook's hash tag so one attempt is one
 * MULTI (Redis Cluster safe), with bounded retention.
 */
export class RedisDeliveryLog implements DeliveryRecorder, DeliveryHistory {
  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly options: DeliveryLogOptions = DEFAULT_DELIVERY_LOG_OPTIONS,
  ) {}

  async recordAttempt(write: AttemptWrite): Promise<{ failingSinceMs: number | undefined }> {
    const { job, attempt, status } = write;
    const k = this.keys.deliveries;
    const recordKey = k.record(job.webhookId, job.deliveryId);
    const dead = status === 'dead';
    const fields: Record<string, string | number> = {
      status,
      attempts: attempt.attempt,
      lastOutcome: attempt.outcome,
      lastStatusCode: attempt.statusCode ?? '',
      updatedAtMs: attempt.atMs,
      nextAttemptAtMs: write.nextAttemptAtMs ?? '',
      // Attempts live in the record itself, one field each: one key per delivery, not two.
      [`attempt:${attempt.attempt}`]: JSON.stringify(attempt),
    };
    if (attempt.attempt === 1) {
      Object.assign(fields, {
        deliveryId: job.deliveryId,
        eventId: job.eventId,
        eventType: job.eventType,
        webhookId: job.webhookId,
        vendorId: job.vendorId,
        acceptedAtMs: job.acceptedAtMs,
        replayOf: job.replayOf ?? '',
      });
    }
    // The body is kept only where a replay may need it: with the dead letter.
    if (dead) fields.body = job.body;
    const multi = this.redis
      .multi()
      .hset(recordKey, fields)
      .pexpire(recordKey, dead ? this.options.deadLetterRetentionMs : this.options.retentionMs)
      .zadd(k.ofWebhook(job.webhookId), job.acceptedAtMs, job.deliveryId);
    // Trimming the recent list on about one delivery in 16 (by id) keeps it bounded at a sixteenth of the cost.
    if (attempt.attempt === 1 && job.deliveryId.endsWith('0')) {
      multi.zremrangebyrank(k.ofWebhook(job.webhookId), 0, -(this.options.recentPerWebhook + 1)).pexpire(k.ofWebhook(job.webhookId), this.options.deadLetterRetentionMs);
    }
    if (dead) {
      multi
        .zadd(k.dead(job.webhookId), attempt.atMs, job.deliveryId)
        .zremrangebyscore(k.dead(job.webhookId), '-inf', attempt.atMs - this.options.deadLetterRetentionMs)
        .pexpire(k.dead(job.webhookId), this.options.deadLetterRetentionMs);
    }
    if (status === 'delivered') {
      multi.del(k.failingSince(job.webhookId));
      await multi.exec();
      return { failingSinceMs: undefined };
    }
    multi.set(k.failingSince(job.webhookId), attempt.atMs, 'NX').get(k.failingSince(job.webhookId));
    const results = await multi.exec();
    const failingSince = results?.at(-1)?.[1];
    return { failingSinceMs: typeof failingSince === 'string' ? Number(failingSince) : undefined };
  }

  async recordDropped(job: DeliverJob, nowMs: number): Promise<void> {
    const recordKey = this.keys.deliveries.record(job.webhookId, job.deliveryId);
    await this.redis
      .multi()
      .hset(recordKey, { deliveryId: job.deliveryId, eventId: job.eventId, eventType: job.eventType, webhookId: job.webhookId, status: 'dropped', acceptedAtMs: job.acceptedAtMs, updatedAtMs: nowMs })
      .pexpire(recordKey, this.options.retentionMs)
      .exec();
  }

  async recent(webhookId: string, limit: number): Promise<DeliverySummary[]> {
    const ids = await this.redis.zrevrange(this.keys.deliveries.ofWebhook(webhookId), 0, limit - 1);
    return this.summaries(webhookId, ids);
  }

  async get(webhookId: string, deliveryId: string): Promise<{ delivery: DeliverySummary; attempts: AttemptRecord[]; body: string | undefined } | undefined> {
    const fields = await this.redis.hgetall(this.keys.deliveries.record(webhookId, deliveryId));
    const delivery = toSummary(fields);
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

  private async summaries(webhookId: string, ids: string[]): Promise<DeliverySummary[]> {
    if (ids.length === 0) return [];
    const summaryFields = ['deliveryId', 'eventId', 'eventType', 'webhookId', 'vendorId', 'status', 'attempts', 'lastOutcome', 'lastStatusCode', 'acceptedAtMs', 'updatedAtMs', 'nextAttemptAtMs', 'replayOf'] as const;
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hmget(this.keys.deliveries.record(webhookId, id), ...summaryFields);
    const rows = (await pipeline.exec()) ?? [];
    return rows
      .map(([, values]) => toSummary(Object.fromEntries(summaryFields.flatMap((name, i) => ((values as (string | null)[])[i] == null ? [] : [[name, (values as string[])[i]!]])))))
      .filter((s): s is DeliverySummary => s !== undefined);
  }
}
