import type { Logger } from '../logger.js';
import type { RedisDeliveryLog } from '../store/delivery-log.js';
import type { RedisEventLog } from '../store/event-log.js';
import type { Redis } from '../store/redis.js';
import type { RedisWebhookStore } from '../store/webhooks.js';

/** How often a worker runs the retention pass (one schedule for every worker: one of them runs it). */
export const RETENTION_PASS_EVERY_MS = 60_000;

/** What one pass removed. */
export interface RetentionSummary {
  webhooks: number;
  events: number;
  records: number;
}

/**
 * The retention pass: every webhook's event log trimmed to its retention (its own, or the
 * installation's), and the delivery records of a webhook with a shorter retention of its own removed
 * past it. The installation's retention needs no pass for records (their keys expire by it) nor for
 * the log of a busy webhook (each append trims); the pass catches the logs of quiet webhooks and the
 * shorter retentions. A deleted webhook's keys expire by the installation's retention.
 */
export class RetentionPass {
  constructor(
    private readonly deps: {
      webhooks: Pick<RedisWebhookStore, 'listAll'>;
      log: Pick<RedisEventLog, 'trim' | 'defaultRetentionMs'>;
      history: Pick<RedisDeliveryLog, 'forgetBefore'>;
      /**
       * Streams that keep whole events or bodies until their count cap (the ingest streams' dead
       * letters, the first-attempt streams' set-aside entries): trimmed to the retention too.
       */
      streams: { redis: Redis; keys: readonly string[] };
      nowMs: () => number;
      logger?: Logger;
    },
  ) {}

  async run(): Promise<RetentionSummary> {
    const webhooks = await this.deps.webhooks.listAll();
    const summary: RetentionSummary = { webhooks: webhooks.length, events: 0, records: 0 };
    for (const webhook of webhooks) {
      const retentionMs = Math.min(webhook.retentionMs ?? Infinity, this.deps.log.defaultRetentionMs);
      summary.events += await this.deps.log.trim(webhook.id, retentionMs);
      if (retentionMs < this.deps.log.defaultRetentionMs)
        summary.records += await this.deps.history.forgetBefore(webhook.id, this.deps.nowMs() - retentionMs);
    }
    // Stream ids are Redis's clock in ms: MINID removes the entries older than the retention.
    const minId = `${Math.max(0, Math.floor(this.deps.nowMs() - this.deps.log.defaultRetentionMs))}`;
    for (const key of this.deps.streams.keys)
      summary.events += Number(await this.deps.streams.redis.xtrim(key, 'MINID', minId));
    if (summary.events > 0 || summary.records > 0)
      this.deps.logger?.info(summary, 'retention: removed events and delivery records past their retention');
    return summary;
  }
}
