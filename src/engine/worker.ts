/**
 * The delivery worker of a process: composeWorker builds it over the shared stores, workerOf from the
 * process's configuration, with its parts in the lifecycle's work phase.
 */
import { batchProcessorOf, createBatchRunner } from '../delivery/batch-processor.js';
import { HttpSender } from '../delivery/outbound/http-sender.js';
import { createOperationalProcessor } from '../delivery/operational.js';
import { createSingleProcessor } from '../delivery/single-processor.js';
import { FifoDriver, fifoLeaseMs } from '../delivery/fifo-driver.js';
import { ReplayRunner } from '../tasks/replay-runner.js';
import { DeliveryWorkerPool } from '../delivery/worker.js';
import { fifoObserver } from '../metrics/observers.js';
import { isRedisUnavailable, type Redis } from '../store/redis.js';
import {
  composeDeliveryDeps,
  lockDurationMsOf,
  senderOptions,
  type DeliverySettings,
  type Stores,
} from './assembly.js';
import { raceTimer } from '../lib/timer-race.js';
import { RedisAttemptJournal } from '../store/attempt-journal.js';
import { RETENTION_PASS_EVERY_MS } from '../tasks/retention.js';
import type { Tracing } from '../domain/trace.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import type { EngineConfig, EngineOptions } from './index.js';
import type { Lifecycle } from './lifecycle.js';

export interface WorkerSettings extends DeliverySettings {
  /** A connection for BullMQ's workers (maxRetriesPerRequest null, no auto-pipelining). */
  workerConnection: Redis;
  /** Told about the worker's own connections (the first-attempt readers'), so their outages are logged. */
  watchConnection?: (connection: Redis) => void;
  /** The operator's receiver of operational webhooks and its secret; absent: this worker sends none. */
  operationalWebhook?: { url: string; secret: string };
  /** Range replays this process runs at once (default REPLAY_SLOTS), and each run's time slice (default REPLAY_SLICE_MS). */
  replays?: { slots?: number; sliceMs?: number };
}

/** Range replays one worker process runs at once: they mostly wait (paced, or for outcomes), so a few. */
const REPLAY_SLOTS = 4;
/**
 * How long a range replay's run keeps its slot before giving it back to the queue's turn order, when
 * it is not over: a vendor waits at most about this long per vendor ahead of it, and a run that
 * goes on costs a few reads of its place per slice.
 */
const REPLAY_SLICE_MS = 10_000;

/** How often a worker projects the delivery log's journal: the most a delivered first attempt waits to be shown. */
const JOURNAL_EVERY_MS = 100;
/** How long a worker's last projection may take at shutdown (what it leaves, another worker projects once its leases end). */
const JOURNAL_CLOSE_MS = 1_000;

/**
 * The delivery log's journal (see store/attempt-journal.ts), when the event log is kept: a shard's
 * lease is a third of the lock duration (at most 5 s), so a dead worker's journal is projected by
 * another before its batches are claimed and re-run, which read the projected records.
 */
function attemptJournal(stores: Stores, settings: WorkerSettings): RedisAttemptJournal | undefined {
  if (!stores.eventLogKept) return undefined;
  const journal = new RedisAttemptJournal(stores.redis, stores.keys, {
    shards: stores.queues.partitions.length,
    everyMs: JOURNAL_EVERY_MS,
    leaseMs: Math.max(500, Math.min(5_000, Math.floor(lockDurationMsOf(settings) / 3))),
    project: (rows) => stores.deliveryLog.project(rows),
    // Redis down is logged once by the outage log; the projection goes on when it is back.
    onError: (error) => {
      if (!isRedisUnavailable(error))
        settings.logger.warn({ err: error.message }, 'delivery log journal not projected; tried again');
    },
  });
  stores.deliveryLog.journalTo(journal);
  return journal;
}

/** The delivery worker of one process over the shared stores. */
function composeWorker(stores: Stores, settings: WorkerSettings) {
  const { deps, sender, endpoints, flow, slots, gate, detach } = composeDeliveryDeps(stores, settings);
  const journal = attemptJournal(stores, settings);
  const runBatch = createBatchRunner(deps);
  const processBatch = batchProcessorOf(runBatch);
  const processSingle = createSingleProcessor(deps);
  const { operationalWebhook } = settings;
  // The operator set this URL, unlike vendors' callback URLs: it is trusted, and usually on the
  // platform's private network, so the SSRF guard does not apply to it (a sender of its own).
  const operationalSender =
    operationalWebhook && new HttpSender({ ...senderOptions(settings), allowPrivateTargets: true, connections: 2 });
  const operationalProcessor =
    operationalSender &&
    operationalWebhook &&
    createOperationalProcessor({
      sender: operationalSender,
      target: operationalWebhook,
      retryScheduleMs: settings.retryScheduleMs,
      timeoutMs: settings.deliveryTimeoutMs,
      logger: settings.logger,
      nowMs: deps.nowMs,
      random: deps.random,
    });
  const fifo = new FifoDriver({
    lines: stores.fifoLines,
    deps,
    partitions: stores.queues.partitions.length,
    leaseMs: fifoLeaseMs(settings.deliveryTimeoutMs, lockDurationMsOf(settings)),
    linesMax: settings.concurrency,
    ...(settings.metrics ? { onHeadBlocked: fifoObserver(settings.metrics) } : {}),
  });
  const replays = new ReplayRunner({
    queue: stores.replayQueue,
    rangeReplayer: stores.rangeReplayer,
    tasks: stores.tasks,
    slots: settings.replays?.slots ?? REPLAY_SLOTS,
    sliceMs: settings.replays?.sliceMs ?? REPLAY_SLICE_MS,
    leaseMs: settings.lockDurationMs ?? 30_000,
    logger: settings.logger,
    nowMs: deps.nowMs,
  });
  const pool = new DeliveryWorkerPool({
    connection: settings.workerConnection,
    keys: stores.keys,
    partitions: stores.queues.partitions.length,
    concurrency: settings.concurrency,
    batchProcessor: processBatch,
    batchRunner: runBatch,
    loggedBodies: (refs) => stores.eventLog.bodiesOf(refs),
    ...(settings.watchConnection ? { watchConnection: settings.watchConnection } : {}),
    singleProcessor: processSingle,
    replayer: stores.replayer,
    rangeReplayer: stores.rangeReplayer,
    retention: stores.retention,
    eraser: stores.eraser,
    ...(operationalProcessor ? { operationalProcessor } : {}),
    logger: settings.logger,
    lockDurationMs: lockDurationMsOf(settings),
  });
  return {
    pool,
    fifo,
    replays,
    /** The delivery log's journal this process appends to and projects (absent without the event log). */
    journal,
    /** This process's endpoints: their circuits, limits and waits. */
    endpoints,
    flow,
    slots,
    gate,
    /** The job processors the pool runs (tests call them with jobs of their own). */
    processBatch,
    processSingle,
    async close(graceMs: number) {
      detach();
      const startedMs = Date.now();
      const ends = await Promise.all([pool.close(graceMs), fifo.close(graceMs), replays.close(graceMs)]);
      let result = ends.every((end) => end === 'drained') ? ('drained' as const) : ('forced' as const);
      // Attempts a batch handed off go on after their job completed; their outcome is recorded too.
      const left = Math.max(0, graceMs - (Date.now() - startedMs));
      const idle = await raceTimer(
        slots.idle().then(() => true),
        left,
        false,
      );
      if (!idle) result = 'forced';
      // Requests still in flight past the grace period are abandoned: their jobs run again elsewhere.
      await Promise.all([sender.close(idle ? undefined : 0), operationalSender?.close(0)]);
      // After the last attempts are recorded: what this process journaled is projected before it goes.
      if (journal)
        await raceTimer(
          journal
            .close()
            .catch((error: Error) =>
              settings.logger.warn(
                { err: error.message },
                'delivery log journal not projected at shutdown; another worker will',
              ),
            ),
          JOURNAL_CLOSE_MS,
          undefined,
        );
      return result;
    },
  };
}

/** The delivery worker of a process: its BullMQ pool, endpoints, send slots and storage gate. */
export type DeliveryWorker = ReturnType<typeof composeWorker>;

/**
 * The worker of a process (roles all and worker) from its configuration, and its parts: the pool
 * starts first; the first-attempt readers, the retention schedule (both once Redis answers), the FIFO
 * driver, the range replays' runner and the delivery log's journal after it. All of them stop in the
 * worker's close, which drains them together within the grace period (the journal last).
 */
export function workerOf(
  config: EngineConfig,
  stores: Stores,
  on: {
    workerConnection: Redis;
    logger: Logger;
    metrics: Metrics | undefined;
    tracing: Tracing | undefined;
    watchConnection: (connection: Redis) => void;
    tuning: EngineOptions['worker'];
    nowMs: () => number;
  },
  lifecycle: Lifecycle,
): DeliveryWorker {
  const { logger, metrics, tracing } = on;
  const worker = composeWorker(stores, {
    workerConnection: on.workerConnection,
    logger,
    concurrency: config.workerConcurrency,
    tlsSessionCache: config.tlsSessionCache,
    ...(config.egressProxy === undefined ? {} : { egressProxy: config.egressProxy }),
    retryScheduleMs: config.retryScheduleMs,
    deliveryTimeoutMs: config.deliveryTimeoutMs,
    allowPrivateTargets: config.allowPrivateTargets,
    sustainedFailureWindowMs: config.sustainedFailureWindowMs,
    lockDurationMs: config.workerLockDurationMs,
    watchConnection: on.watchConnection,
    ...(metrics ? { metrics } : {}),
    ...(config.operationalWebhook ? { operationalWebhook: config.operationalWebhook } : {}),
    ...(tracing === undefined ? {} : { tracing }),
    ...on.tuning,
    nowMs: on.nowMs,
  });
  const { pool, journal } = worker;
  lifecycle.add({
    name: 'delivery worker',
    phase: 'work',
    start: () => pool.start(),
    // Bounded by the grace period its attempts in flight get.
    boundsItself: true,
    async stop({ started, graceMs }) {
      // One that never started (a start-up that failed, e.g. a port in use) has nothing to drain.
      if (!started) {
        await worker.close(0);
        return undefined;
      }
      const ended = await worker.close(graceMs);
      logger.info(
        { ended },
        ended === 'drained'
          ? 'in-flight deliveries finished'
          : 'grace period over; unfinished deliveries return to the queue',
      );
      return ended;
    },
  });
  lifecycle.add({
    name: 'first-attempt readers',
    phase: 'work',
    start: ({ whenRedisAnswers }) =>
      pool.readers.forEach((reader, n) =>
        whenRedisAnswers(
          // What a dead worker journaled is projected before its batches can be claimed here and
          // re-run: a re-run reads the delivery log to skip what was delivered.
          async () => {
            await journal?.drain();
            await reader.start();
          },
          `first-attempt reader ${n}`,
        ),
      ),
  });
  lifecycle.add({ name: 'FIFO driver', phase: 'work', start: () => worker.fifo.start() });
  lifecycle.add({ name: 'replay runner', phase: 'work', start: () => worker.replays.start() });
  if (journal) lifecycle.add({ name: 'delivery log journal', phase: 'work', start: () => journal.start() });
  lifecycle.add({
    name: 'retention schedule',
    phase: 'work',
    start: ({ whenRedisAnswers }) => whenRedisAnswers(() => stores.queues.scheduleRetention(RETENTION_PASS_EVERY_MS)),
  });
  return worker;
}
