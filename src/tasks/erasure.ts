import { setTimeout as sleep } from 'node:timers/promises';
import type { Job, Queue } from 'bullmq';
import type { DeliverJob } from '../domain/delivery.js';
import type { Logger } from '../logger.js';
import { endpointKey } from '../domain/endpoint.js';
import { deliveryIdFor, newId } from '../domain/ids.js';
import type { Task } from '../domain/task.js';
import type { RedisApiKeyStore } from '../store/api-keys.js';
import { endpointDigest } from '../store/endpoints.js';
import type { RedisEventLog } from '../store/event-log.js';
import type { RedisKeys } from '../store/keys.js';
import type { RedisPortalSessions } from '../store/portal-sessions.js';
import type { RedisReplayQueue } from '../store/replay-queue.js';
import { masterNodes, type Redis } from '../store/redis.js';
import { linesOf, type RedisFifoLines } from '../store/fifo-lines.js';
import { entriesWhere, eraseFromGroupStream, StreamCompactor, type EntryFields } from '../store/stream-erasure.js';
import type { DocWriter } from '../store/versioned-docs.js';
import type { RedisWebhookStore } from '../store/webhooks.js';
import { STREAM_GROUP_DEFAULT } from '../ingest/stream-source.js';
import { partitionOf, type EraseJob } from '../delivery/jobs.js';
import type { DeliveryQueues } from '../delivery/queue.js';

/** BullMQ job states that may hold a delivery's body. */
const JOB_STATES = ['waiting', 'delayed', 'prioritized', 'failed', 'completed'] as const;
/** Jobs read per page when looking through a queue. */
const JOBS_PER_PAGE = 500;
/** Keys read per SCAN call. */
const SCAN_COUNT = 1_000;

export interface ErasureDeps {
  redis: Redis;
  keys: RedisKeys;
  webhooks: Pick<RedisWebhookStore, 'list' | 'delete'>;
  eventLog: Pick<RedisEventLog, 'erase'>;
  queues: Pick<DeliveryQueues, 'partitions' | 'addErase'>;
  /** FIFO lines: deliveries are taken out of them by their store, which keeps each line's ready and heads entries with it. */
  lines: Pick<RedisFifoLines, 'remove' | 'drop'>;
  apiKeys: Pick<RedisApiKeyStore, 'list' | 'revoke'>;
  portalSessions: Pick<RedisPortalSessions, 'revokeVendor'>;
  /** The range replays' queue: a vendor's replays waiting there (their jobs name its webhooks) leave it. */
  replayQueue: Pick<RedisReplayQueue, 'withdrawVendor'>;
  tasks: DocWriter<Task>;
  ingestStreams: number;
  /**
   * How long attempts in flight may still write after the first pass (a worker's lock and a
   * delivery's timeout): the second pass, this much later, removes what they wrote.
   */
  settleMs: number;
  nowMs: () => number;
  logger?: Logger;
}

/** What an erasure removed, and what it could not. */
export interface ErasureSummary {
  webhooks: number;
  records: number;
  /** Log entries, recent events and stream entries. */
  events: number;
  jobs: number;
  keys: number;
  /**
   * Ingest streams that still held entries not yet ingested beside the erased ones: Redis keeps the
   * erased entries' bytes in a node shared with those until they are ingested and the stream is
   * trimmed past them (within the stream consumer's maintenance interval, 30 s, once ingested).
   */
  streamsAwaitingIngest: string[];
}

/**
 * Erasure: one event's payload and records everywhere, or everything of a vendor (webhooks,
 * deliveries, payloads, stream entries, portal sessions, API keys, replay tasks), each as a task run
 * by a worker, in two passes: the second, after attempts in flight have finished, removes what they
 * wrote. Stream entries are erased so that Redis keeps none of their bytes (see stream-erasure.ts).
 * What stays, by design: the ingest dedupe mark of an erased event id (64 bits of a digest of the
 * id, no payload; it keeps a producer's retry from bringing the event back within the window), and
 * the platform's read models (a machine's, deployment's or task's current state, which is the
 * platform's own and no event's).
 */
export class Eraser {
  private readonly compactor: StreamCompactor;

  constructor(private readonly deps: ErasureDeps) {
    this.compactor = new StreamCompactor(deps.redis, deps.keys.streamCompaction);
  }

  /** Starts erasing an event (a task); its id. */
  async startEvent(eventId: string, requestedBy: string): Promise<string> {
    return this.start({ kind: 'event', id: eventId, requestedBy });
  }

  /** Starts erasing a vendor's data (a task); its id. */
  async startVendor(vendorId: string, requestedBy: string): Promise<string> {
    return this.start({ kind: 'vendor', id: vendorId, requestedBy });
  }

  private async start(what: Omit<EraseJob, 'taskId'>): Promise<string> {
    const taskId = newId();
    await this.deps.tasks.put({ task_id: taskId, status: 'pending', fail_reason: null }, this.deps.nowMs());
    await this.deps.queues.addErase({ taskId, ...what });
    return taskId;
  }

  /** Runs an erasure task (the control worker). */
  async run(job: EraseJob): Promise<ErasureSummary> {
    const put = (status: Task['status'], summary?: ErasureSummary, failReason: string | null = null) =>
      this.deps.tasks.put(
        {
          task_id: job.taskId,
          status,
          fail_reason: failReason,
          // The task's progress counts webhooks; the log line of the erasure has every count.
          ...(summary ? { progress: { total: summary.webhooks, done: summary.webhooks } } : {}),
        },
        this.deps.nowMs(),
      );
    try {
      await put('in_progress');
      const summary = job.kind === 'event' ? await this.eraseEvent(job.id, true) : await this.eraseVendor(job.id, true);
      await put('success', summary);
      this.deps.logger?.info(
        {
          event: 'erase.finished',
          kind: job.kind,
          taskId: job.taskId,
          keyId: job.requestedBy,
          ...summary,
          [job.kind === 'event' ? 'eventId' : 'vendorId']: job.id,
        },
        job.kind === 'event' ? 'an event was erased' : "a vendor's data was erased",
      );
      return summary;
    } catch (error) {
      await put('failed', undefined, `erasure stopped: ${(error as Error).message}; run it again`);
      throw error;
    }
  }

  /**
   * Erases one event: its ingest stream entries, log entries, bodies, delivery records (replays too),
   * queued jobs, and copies kept for filters and dead streams.
   */
  async eraseEvent(eventId: string, twoPasses = false): Promise<ErasureSummary> {
    const summary = emptySummary();
    // The streams first: an entry not yet ingested is gone before ingest reads it.
    const fromIngest = await this.removeFromStreams(summary, (fields) =>
      fields.some((value) => value.toLowerCase().includes(eventId)),
    );
    const hit = await this.eraseEventFromWebhooks(eventId, summary, await this.webhookIdsInRedis());
    if (twoPasses && (hit.size > 0 || fromIngest > 0)) {
      await sleep(this.deps.settleMs);
      for (const webhookId of hit) {
        summary.jobs += await this.removeJobs(webhookId, (job) => job.eventId === eventId);
        summary.records += await this.removeRecords(
          webhookId,
          await this.recordsOf(webhookId, (fields) => fields.eventId === eventId),
        );
      }
      // An entry a consumer was ingesting as it was removed from its stream reached its webhooks
      // after the first pass looked: every webhook is looked at again.
      if (fromIngest > 0)
        for (const id of await this.eraseEventFromWebhooks(eventId, summary, await this.webhookIdsInRedis()))
          hit.add(id);
    }
    summary.webhooks = hit.size;
    return summary;
  }

  /** The first pass of an event's erasure over these webhooks; the ones that held some of it. */
  private async eraseEventFromWebhooks(
    eventId: string,
    summary: ErasureSummary,
    webhookIds: Iterable<string>,
  ): Promise<Set<string>> {
    const hit = new Set<string>();
    for (const webhookId of webhookIds) {
      const first = deliveryIdFor(eventId, webhookId);
      const logged = await this.deps.eventLog.erase(webhookId, [first]);
      const recent = await this.forgetRecentEvent(webhookId, eventId);
      const recorded = await this.deps.redis.exists(this.deps.keys.deliveries.record(webhookId, first));
      // A webhook the event never reached has none of it: its records are not read one by one.
      if (logged + recent + recorded === 0) continue;
      const records = await this.recordsOf(webhookId, (fields) => fields.eventId === eventId);
      // A first attempt delivered without a record of its own (a compact one, erased with the log's
      // statuses) is still listed among the webhook's recent deliveries.
      if (logged > 0 && !records.includes(first)) records.push(first);
      hit.add(webhookId);
      summary.events += logged + recent;
      summary.jobs += await this.removeJobs(webhookId, (job) => job.eventId === eventId);
      summary.records += await this.removeRecords(webhookId, records);
    }
    return hit;
  }

  /**
   * Erases a vendor: its webhooks with everything under them, its events in the ingest streams and
   * the dead streams, its queued jobs, sessions, keys, replay tasks and endpoint state.
   */
  async eraseVendor(vendorId: string, twoPasses = false): Promise<ErasureSummary> {
    const summary = emptySummary();
    const namesVendor = vendorMatcher(vendorId);
    const webhooks = await this.deps.webhooks.list(vendorId);
    const ids = new Set(webhooks.map((w) => w.id));
    // Endpoint keys are named by the vendor's origins: read them before the webhooks go.
    const digests = new Set(webhooks.map((w) => endpointDigest(endpointKey(vendorId, w.callbackUrl))));
    for (const webhook of webhooks) await this.deps.webhooks.delete(vendorId, webhook.id);
    summary.webhooks = webhooks.length;
    const purge = async () => {
      await this.removeFromStreams(summary, (fields) => fields.some(namesVendor));
      for (const webhookId of ids) {
        summary.jobs += await this.removeJobs(webhookId, () => true);
        summary.keys += await this.deleteMatching(
          `${this.deps.keys.deliveries.ofWebhook(webhookId).replace(/:deliveries$/, '')}:*`,
        );
        summary.keys += await this.deps.lines.drop(webhookId);
      }
    };
    await purge();
    for (const digest of digests) {
      const { endpointAnswered, endpointFlow } = this.deps.keys;
      summary.keys += await this.deps.redis.del(endpointAnswered(digest));
      summary.keys += await this.deps.redis.del(endpointFlow.pause(digest));
      summary.keys += await this.deps.redis.del(endpointFlow.limits(digest));
    }
    summary.keys += await this.deps.portalSessions.revokeVendor(vendorId);
    for (const key of (await this.deps.apiKeys.list()).filter((k) => k.vendorId === vendorId)) {
      await this.deps.apiKeys.revoke(key.id);
      summary.keys += 1;
    }
    summary.keys += await this.deps.replayQueue.withdrawVendor(vendorId);
    summary.keys += await this.removeReplayTasks(vendorId);
    if (twoPasses && ids.size > 0) {
      // Deliveries in flight when the webhooks went are dropped by their workers, which write a record.
      await sleep(this.deps.settleMs);
      await purge();
    }
    return summary;
  }

  /** Ids of every webhook with a log or delivery records in Redis, deleted ones included. */
  private async webhookIdsInRedis(): Promise<Set<string>> {
    const ids = new Set<string>();
    const { ofWebhook, logBodies } = this.deps.keys.deliveries;
    for (const make of [ofWebhook, logBodies]) {
      const [before, after] = make('\u0000').split('\u0000') as [string, string];
      await this.scan(`${before}*${after}`, (keys) => {
        for (const key of keys) ids.add(key.slice(before.length, key.length - after.length));
      });
    }
    return ids;
  }

  /** The webhook's delivery record ids whose fields pass `test` (one slot: a SCAN of its record keys). */
  private async recordsOf(webhookId: string, test: (fields: Record<string, string>) => boolean): Promise<string[]> {
    const prefix = this.deps.keys.deliveries.record(webhookId, '');
    const found: string[] = [];
    await this.scan(`${prefix}*`, async (keys) => {
      for (const key of keys) {
        const [eventId, replayOf] = await this.deps.redis.hmget(key, 'eventId', 'replayOf');
        if (test({ eventId: eventId ?? '', replayOf: replayOf ?? '' })) found.push(key.slice(prefix.length));
      }
    });
    return found;
  }

  private async removeRecords(webhookId: string, deliveryIds: readonly string[]): Promise<number> {
    if (deliveryIds.length === 0) return 0;
    const k = this.deps.keys.deliveries;
    await this.deps.redis
      .multi()
      .del(...deliveryIds.map((id) => k.record(webhookId, id)))
      .zrem(k.ofWebhook(webhookId), ...deliveryIds)
      .zrem(k.dead(webhookId), ...deliveryIds)
      .exec();
    return deliveryIds.length;
  }

  /** Takes the event out of the webhook's recent events (the filter dry run's); how many went. */
  private async forgetRecentEvent(webhookId: string, eventId: string): Promise<number> {
    const key = this.deps.keys.deliveries.recentEvents(webhookId);
    let n = 0;
    for (const body of await this.deps.redis.lrange(key, 0, -1)) {
      if (eventIdOf(body) === eventId) n += await this.deps.redis.lrem(key, 0, body);
    }
    return n;
  }

  /**
   * Removes the webhook's queued deliveries that pass `test` from its partition's queues: single
   * jobs whole, parked batches rewritten without them (removed once empty). A job running now is
   * left; the second pass finds what it wrote.
   */
  private async removeJobs(webhookId: string, test: (job: DeliverJob) => boolean): Promise<number> {
    const partition = this.deps.queues.partitions[partitionOf(webhookId, this.deps.queues.partitions.length)]!;
    let removed = 0;
    const matches = (job: DeliverJob) => job.webhookId === webhookId && test(job);
    // Found first, then changed: removing while paging would shift the pages.
    const singles = await this.jobsWhere(partition.singles, (data) => matches(data as DeliverJob));
    const batches = await this.jobsWhere(partition.batches, (data) =>
      ((data as { deliveries?: DeliverJob[] }).deliveries ?? []).some(matches),
    );
    for (const job of singles) removed += await job.remove().then(ok, failed);
    for (const job of batches) {
      const deliveries = (job.data as { deliveries: DeliverJob[] }).deliveries;
      const kept = deliveries.filter((d) => !matches(d));
      const done =
        kept.length === 0
          ? await job.remove().then(ok, failed)
          : await job.updateData({ ...(job.data as object), deliveries: kept }).then(ok, failed);
      if (done === 1) removed += deliveries.length - kept.length;
    }
    const f = this.deps.keys.fifo;
    const n = partitionOf(webhookId, this.deps.queues.partitions.length);
    // Its own line and each of its ordering key's (all under the partition's tag: one slot).
    for (const line of linesOf(webhookId)) {
      const jobs = await this.deps.redis.hgetall(f.jobs(n, line));
      const lined = Object.entries(jobs).flatMap(([id, json]) => (matches(JSON.parse(json) as DeliverJob) ? [id] : []));
      removed += await this.deps.lines.remove(line, lined, this.deps.nowMs());
    }
    return removed;
  }

  /**
   * Deletes the entries whose fields pass `test` from the ingest streams (acknowledged too, so no
   * consumer is left holding one), their dead streams and the first-attempt failed streams, so that
   * Redis keeps none of their bytes (see stream-erasure.ts); notes in the summary what it removed and
   * the ingest streams where bytes stay until their backlog is ingested. Answers how many entries
   * left the ingest streams.
   */
  private async removeFromStreams(summary: ErasureSummary, test: (fields: EntryFields) => boolean): Promise<number> {
    const { events, firstAttempts } = this.deps.keys;
    let fromIngest = 0;
    for (let n = 0; n < this.deps.ingestStreams; n += 1) {
      const stream = events.streamOf(n);
      const ids = await entriesWhere(this.deps.redis, stream, test);
      if (ids.length === 0) continue;
      const { deleted, unfinished } = await eraseFromGroupStream(this.deps.redis, stream, STREAM_GROUP_DEFAULT, ids);
      fromIngest += deleted;
      if (unfinished > 0 && !summary.streamsAwaitingIngest.includes(stream)) summary.streamsAwaitingIngest.push(stream);
    }
    summary.events += fromIngest;
    const setAside = [
      ...Array.from({ length: this.deps.ingestStreams }, (_, n) => events.deadOf(n)),
      ...this.deps.queues.partitions.map((_, n) => firstAttempts.failedOf(n)),
    ];
    for (const stream of setAside)
      summary.events += await this.compactor.erase(stream, await entriesWhere(this.deps.redis, stream, test));
    return fromIngest;
  }

  /** Deletes a vendor's replay tasks: their bookkeeping and documents. */
  private async removeReplayTasks(vendorId: string): Promise<number> {
    const { state } = this.deps.keys.replayTask;
    const [before, after] = state('\u0000').split('\u0000') as [string, string];
    let removed = 0;
    await this.scan(`${before}*${after}`, async (keys) => {
      for (const key of keys) {
        if ((await this.deps.redis.hget(key, 'vendorId')) !== vendorId) continue;
        const taskId = key.slice(before.length, key.length - after.length);
        removed += await this.deps.redis.del(key, this.deps.keys.replayTask.open(taskId), this.deps.keys.task(taskId));
      }
    });
    return removed;
  }

  private async deleteMatching(pattern: string): Promise<number> {
    let removed = 0;
    await this.scan(pattern, async (keys) => {
      // One webhook's keys share its hash tag (one slot), so one UNLINK takes a page of them.
      if (keys.length > 0) removed += await this.deps.redis.unlink(...keys);
    });
    return removed;
  }

  /** SCANs every master for `pattern`, handing each page of keys to `each`. */
  private async scan(pattern: string, each: (keys: string[]) => void | Promise<void>): Promise<void> {
    for (const node of await masterNodes(this.deps.redis)) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
        cursor = next;
        if (keys.length > 0) await each(keys);
      } while (cursor !== '0');
    }
  }

  /** The queue's jobs, in the states that may hold a body, whose data passes `test` (read a page at a time). */
  private async jobsWhere(queue: Queue, test: (data: unknown) => boolean): Promise<Job[]> {
    const found: Job[] = [];
    // Bounded: a queue holds what the engine queued; pages of JOBS_PER_PAGE.
    for (let start = 0; start < 100_000_000; start += JOBS_PER_PAGE) {
      const jobs = await queue.getJobs([...JOB_STATES], start, start + JOBS_PER_PAGE - 1, true);
      for (const job of jobs) if (job && test(job.data)) found.push(job);
      if (jobs.length < JOBS_PER_PAGE) break;
    }
    return found;
  }
}

const ok = () => 1;
const failed = () => 0;

function emptySummary(): ErasureSummary {
  return { webhooks: 0, records: 0, events: 0, jobs: 0, keys: 0, streamsAwaitingIngest: [] };
}

/**
 * Whether a stream entry's field names the vendor: an event's `vendor_id`, or a delivery's
 * `vendorId` (a first-attempt batch). Matched in the text, so an entry set aside for not being
 * valid JSON is found too.
 */
function vendorMatcher(vendorId: string): (value: string) => boolean {
  const quoted = JSON.stringify(vendorId).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const pattern = new RegExp(`"(?:vendor_id|vendorId)"\\s*:\\s*${quoted}`);
  return (value) => pattern.test(value);
}

function eventIdOf(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { event_id?: unknown };
    return typeof parsed.event_id === 'string' ? parsed.event_id : undefined;
  } catch {
    return undefined;
  }
}
