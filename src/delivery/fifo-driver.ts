import { withPriority } from './endpoints/wakeups.js';
import { raceTimer, wakeableSleep } from '../lib/timer-race.js';
import { randomUUID } from 'node:crypto';
import type { DeliverJob } from '../domain/delivery.js';
import type { DeliveryProgress } from '../store/delivery-log.js';
import { webhookOfLine, type FifoLineStore } from '../store/fifo-lines.js';
import { isRedisUnavailable } from '../store/redis.js';
import { finish, FINISHED, recheckHold, runDelivery, type DeliveryProcessorDeps } from './attempt.js';
import { StorageUnavailableError } from './signals.js';
import { dueAtOf } from './single-processor.js';
import { giveUpAfter } from './endpoints/admission.js';

/**
 * FIFO webhooks (`ordering: fifo`): their deliveries go out one at a time per line, in the order
 * ingest accepted them, over all workers. Ingest appends them to a line of the webhook
 * (store/fifo-lines.ts) instead of a batch job: its own line, or with an ordering key the line of
 * the key value's bucket, so lines of one webhook go out in parallel. Each worker runs one driver:
 * it takes lines whose head is due from the ready sets, claims a line's lease, and drives its head
 * through the run every delivery takes (attempt.ts). Which line a delivery waits in is settled at
 * ingest; the driver reads no webhook's ordering. The head leaves the line only once it is
 * delivered, dead-lettered or dropped, by a write fenced with the lease and the head's id; a retry
 * or a deferral leaves it at the head and marks the line ready at that time, so whatever is behind
 * it waits, and nothing in the webhook's other lines.
 *
 * Why the order holds through crashes and lost leases: the only way past a head is its removal,
 * and its removal follows its final record. A worker killed mid-attempt leaves the head in place
 * and its lease to expire; the next holder reads the delivery's record (progressOf) and sends the
 * same head again as the same attempt. A worker that lost its lease without knowing (a pause
 * longer than the lease) may still finish an attempt of the head it held, beside the new holder:
 * a duplicate of that head, never a later delivery ahead of it, since it cannot remove the head.
 */

/** What to do with a line's head, from its delivery record. */
export type HeadPlan =
  { kind: 'finished' } | { kind: 'wait'; untilMs: number } | { kind: 'attempt'; attemptNo: number; dueAtMs: number };

/** A head that comes up more than this before its attempt is due waits (clock skew between workers). */
const EARLY_TOLERANCE_MS = 100;

/**
 * The plan for a head: finished already (a worker recorded its end and died before removing it);
 * wait until its next attempt is due; or attempt it now, as the attempt after those recorded.
 */
export function planHead(
  job: DeliverJob,
  progress: DeliveryProgress | undefined,
  scheduleMs: readonly number[],
  nowMs: number,
): HeadPlan {
  if (progress && FINISHED.has(progress.status)) return { kind: 'finished' };
  const dueAtMs = dueAtOf(job, progress, scheduleMs);
  if (dueAtMs > nowMs + EARLY_TOLERANCE_MS) return { kind: 'wait', untilMs: dueAtMs };
  return { kind: 'attempt', attemptNo: (progress?.attempts ?? 0) + 1, dueAtMs };
}

/**
 * How long a worker's lease on a line lasts without renewal: at least one attempt's timeout plus a
 * margin, so a renewal that comes late does not hand the line over mid-attempt (a duplicate); and
 * no shorter than the queue's job lock, the time after which a killed worker's work is taken over.
 */
export function fifoLeaseMs(deliveryTimeoutMs: number, lockDurationMs: number): number {
  return Math.max(lockDurationMs, deliveryTimeoutMs + 2_000);
}

/** The next idle wait of the driver's poll: doubling from IDLE_MIN_MS up to IDLE_MAX_MS, and never past the next ready time. */
export function nextIdleMs(previousMs: number, nextReadyInMs: number | undefined): { waitMs: number; nextMs: number } {
  const nextMs = Math.min(IDLE_MAX_MS, Math.max(IDLE_MIN_MS, previousMs * 2));
  const waitMs = nextReadyInMs === undefined ? previousMs : Math.max(IDLE_MIN_MS, Math.min(previousMs, nextReadyInMs));
  return { waitMs, nextMs };
}

/** The first wait of an idle poll; it doubles while nothing is due. */
export const IDLE_MIN_MS = 20;
/** The longest wait of an idle poll: a delivery to an idle FIFO line starts at most this late. */
export const IDLE_MAX_MS = 500;
/** Heads one turn drives at most before the line goes back to the ready set, so a busy line cannot hold a driver's room. */
const TURN_HEADS_MAX = 100;
/** How long one turn lasts at most, for the same reason. */
const TURN_MS_MAX = 5_000;

export interface FifoDriverOptions {
  lines: FifoLineStore;
  deps: DeliveryProcessorDeps;
  partitions: number;
  /** See fifoLeaseMs. */
  leaseMs: number;
  /** Lines this process drives at once; each holds at most one send slot. */
  linesMax: number;
  /** Called when a head must wait (a retry or a deferral), holding back its line (metrics). */
  onHeadBlocked?: () => void;
}

/**
 * What a head's drive ends in: the next head may go; the line waits until `untilMs` (`held`: for its
 * webhook's pause; `wakeOn`: held back behind that endpoint, and woken as soon as it takes
 * deliveries again); or storage failed.
 */
type HeadEnd =
  { kind: 'next' } | { kind: 'wait'; untilMs: number; held?: true; wakeOn?: string; high?: true } | { kind: 'storage' };

/**
 * Where a turn left its line: ready again at `readyAtMs` (undefined: empty), `held` for a pause,
 * woken early by `wakeOn`'s endpoint; or `lost` to another worker.
 */
type LineEnd = { readyAtMs: number | undefined; held: boolean; wakeOn?: string; high?: true } | 'lost';

/** The FIFO driver of one worker process (see the top of this file). */
export class FifoDriver {
  private readonly turns = new Map<string, Promise<void>>();
  private stopped = false;
  private loop: Promise<void> | undefined;
  private wake: () => void = () => undefined;
  /** Resolves when close() is called. */
  private readonly stopping: Promise<void>;
  private stop: () => void = () => undefined;

  constructor(private readonly options: FifoDriverOptions) {
    this.stopping = new Promise((resolve) => (this.stop = resolve));
  }

  /** Starts polling the ready sets. */
  start(): void {
    this.loop ??= this.run();
  }

  /**
   * Takes no new line, lets each turn finish the head it is on (and give its lease back) for up to
   * `graceMs`; past that, the leases of unfinished turns expire and their heads are sent again elsewhere.
   */
  async close(graceMs: number): Promise<'drained' | 'forced'> {
    this.stopped = true;
    this.stop();
    this.wake();
    const drained = Promise.all([this.loop, ...this.turns.values()]).then(() => 'drained' as const);
    return raceTimer(drained, graceMs, 'forced' as const);
  }

  private async run(): Promise<void> {
    const { deps, lines, partitions, linesMax, leaseMs } = this.options;
    let idleMs = IDLE_MIN_MS;
    while (!this.stopped) {
      let claimed = 0;
      let nextAtMs: number | undefined;
      // Nothing is taken while storage fails: a head's attempt could not be recorded.
      if (deps.gate.allows(deps.gate.epoch)) {
        try {
          for (let partition = 0; partition < partitions && !this.stopped; partition++) {
            const nowMs = deps.nowMs();
            const due = await lines.due(partition, nowMs, linesMax - this.turns.size);
            if (due.nextAtMs !== undefined) nextAtMs = Math.min(nextAtMs ?? Infinity, due.nextAtMs);
            for (const lineId of due.lineIds) {
              if (this.stopped || this.turns.has(lineId) || this.turns.size >= linesMax) continue;
              const token = randomUUID();
              let taken: boolean;
              try {
                taken = await lines.claim(lineId, token, nowMs, leaseMs);
              } catch (error) {
                // The lease may have been taken without the answer coming back: give it back once storage answers.
                this.track(lineId, this.giveBack(lineId, token));
                throw error;
              }
              if (!taken) continue;
              claimed += 1;
              this.track(lineId, this.turn(lineId, token));
            }
          }
        } catch (error) {
          deps.logger.debug({ err: (error as Error).message }, 'fifo lines not polled');
        }
      }
      if (this.stopped) break;
      let waitMs: number;
      if (claimed > 0 && this.turns.size < linesMax) {
        // More may be due at once: look again without waiting.
        idleMs = IDLE_MIN_MS;
        continue;
      } else if (claimed > 0 || this.turns.size >= linesMax) {
        // Full: a turn's end wakes the loop.
        idleMs = IDLE_MIN_MS;
        waitMs = IDLE_MAX_MS;
      } else {
        const idle = nextIdleMs(idleMs, nextAtMs === undefined ? undefined : nextAtMs - deps.nowMs());
        waitMs = idle.waitMs;
        idleMs = idle.nextMs;
      }
      await this.sleep(waitMs);
    }
  }

  /** Waits `ms`, or less when a turn ends or the driver stops. */
  private async sleep(ms: number): Promise<void> {
    await wakeableSleep(ms, (wake) => (this.wake = wake));
    this.wake = () => undefined;
  }

  /** Keeps `work` on a line as this process's, until it settles. */
  private track(lineId: string, work: Promise<void>): void {
    const turn = work
      .catch((error: Error) => {
        // An outage is logged once by the connection watcher and the storage gate.
        const level = isRedisUnavailable(error) ? 'debug' : 'warn';
        this.options.deps.logger[level](
          { webhookId: webhookOfLine(lineId), lineId, err: error.message },
          'fifo turn stopped; the line is taken up again when its lease ends',
        );
      })
      .finally(() => {
        this.turns.delete(lineId);
        this.wake();
      });
    this.turns.set(lineId, turn);
  }

  /**
   * One turn on a line: heads one after another while the lease holds, until the line is empty, a
   * head must wait, or the turn's bound; then the line goes back to the ready set at the time its
   * head is due, and the lease is given back. When storage fails meanwhile, the lease is given
   * back once it answers again, so the line does not stand still until the lease would end.
   */
  private async turn(lineId: string, token: string): Promise<void> {
    const { deps, lines, leaseMs } = this.options;
    // Sends stop for good in this turn once storage has failed since it began (its lease may have expired meanwhile).
    const epoch = deps.gate.epoch;
    const lease = { held: true };
    const renewal = setInterval(
      () =>
        void lines.renew(lineId, token, deps.nowMs(), leaseMs).then(
          (ok) => (lease.held &&= ok),
          () => undefined,
        ),
      Math.floor(leaseMs / 3),
    );
    try {
      const end = await this.driveLine(lineId, token, epoch, lease);
      if (end !== 'lost') {
        await lines.release(lineId, token, end.readyAtMs, end.held);
        // An enable that came before the release made the line due, and the release put it back to the hold's end.
        if (end.held) await recheckHold(this.options.deps, webhookOfLine(lineId), []);
        // Only once released: a wake before the release would be undone by the ready time it sets.
        if (end.wakeOn !== undefined && end.readyAtMs !== undefined)
          deps.wakeups.register(
            end.wakeOn,
            [
              withPriority(
                { webhookId: webhookOfLine(lineId), jobId: lineId, deliveries: 1, parked: false, line: true },
                end.high,
              ),
            ],
            end.readyAtMs,
          );
      }
    } catch (error) {
      if (deps.gate.allows(epoch) && !isRedisUnavailable(error as Error)) throw error;
      await this.giveBack(lineId, token);
    } finally {
      clearInterval(renewal);
    }
  }

  /**
   * Gives a lease back after storage failed: once storage answers again, and again every
   * IDLE_MAX_MS while it still fails, until given back or the driver stops (then the lease ends by
   * itself). Without this, the line would stand still until the lease's end after every outage.
   */
  private async giveBack(lineId: string, token: string): Promise<void> {
    const { deps, lines } = this.options;
    while (!this.stopped) {
      await Promise.race([deps.gate.whenOpen(), this.stopping]);
      if (this.stopped) return;
      try {
        return await lines.release(lineId, token, deps.nowMs());
      } catch (error) {
        if (!isRedisUnavailable(error as Error)) throw error;
        await raceTimer(this.stopping, IDLE_MAX_MS, undefined);
      }
    }
  }

  /**
   * Drives a line's heads while the lease holds, within a turn's bounds; answers when the line is
   * ready again (undefined: it is empty), or `lost` when another worker holds it now.
   */
  private async driveLine(lineId: string, token: string, epoch: number, lease: { held: boolean }): Promise<LineEnd> {
    const { deps, lines } = this.options;
    const endsAtMs = deps.nowMs() + TURN_MS_MAX;
    let head = await lines.head(lineId, deps.nowMs());
    for (let n = 0; n < TURN_HEADS_MAX && deps.nowMs() < endsAtMs && !this.stopped; n++) {
      if (!lease.held) return 'lost';
      if (head === undefined) return { readyAtMs: undefined, held: false };
      const end = await this.driveHead(head.job, epoch);
      if (end.kind === 'storage') throw new StorageUnavailableError();
      if (end.kind === 'wait')
        return {
          readyAtMs: end.untilMs,
          held: end.held === true,
          ...(end.wakeOn === undefined ? {} : { wakeOn: end.wakeOn }),
          ...(end.high === true ? { high: true as const } : {}),
        };
      const advanced = await lines.advance(lineId, token, head.job.deliveryId, deps.nowMs());
      // Not removed: the lease was lost, and its new holder goes on from this head.
      if (!advanced.removed) return 'lost';
      head = advanced.next;
    }
    return lease.held ? { readyAtMs: deps.nowMs(), held: false } : 'lost';
  }

  /** The head's next step, as a single delivery job would take it (single-processor.ts), turned into the line's terms. */
  private async driveHead(job: DeliverJob, epoch: number): Promise<HeadEnd> {
    const { deps, onHeadBlocked } = this.options;
    const [progress] = await deps.recorder.progressOf([job]);
    const plan = planHead(job, progress, deps.retryScheduleMs, deps.nowMs());
    if (plan.kind === 'finished') {
      finish(deps, { kind: 'skipped', job });
      return { kind: 'next' };
    }
    if (plan.kind === 'wait') return plan;
    const run = await runDelivery(deps, job, plan.attemptNo, {
      dueAtMs: plan.dueAtMs,
      epoch,
      // A first contact to its endpoint in flight (another line's head, often: a new keyed webhook's
      // lines start together) is waited for as a batch waits, when it is answered that soon.
      giveUp: giveUpAfter(deps.suspectHoldMs),
      forceProbe: job.manual === true,
      deferJitterMs: 0,
      // A head waits for room at its endpoint's concurrency limit as a single job does.
      roomWaitMs: deps.suspectHoldMs,
    });
    if (run.kind === 'storage') return { kind: 'storage' };
    if (run.kind === 'held' || run.kind === 'deferred') {
      // Paused: the head, and the line behind it, waits for the enable (its turn's end wakes it
      // again if one came meanwhile), or until its hold ends. Held back without an attempt
      // (breaker, rate limit): the record says when it will be tried; held back behind its
      // endpoint, the line is woken as soon as the endpoint takes deliveries again (the wakeups,
      // registered at the turn's end), its ready time only the bound if this process dies meanwhile.
      const untilMs = run.kind === 'held' ? run.heldUntilMs : run.retryAtMs;
      await deps.recorder.recordDeferred([{ job, nextAttemptAtMs: untilMs, dueAtMs: plan.dueAtMs }]);
      finish(deps, { kind: 'deferred', job, reason: run.kind === 'held' ? 'webhook_paused' : run.reason });
      onHeadBlocked?.();
      if (run.kind === 'held') return { kind: 'wait', untilMs, held: true };
      return {
        kind: 'wait',
        untilMs,
        ...(run.wakeOn === undefined ? {} : { wakeOn: run.wakeOn }),
        ...(run.high === true ? { high: true as const } : {}),
      };
    }
    const { finished, retryDelayMs } = run;
    if (retryDelayMs === undefined) return { kind: 'next' };
    onHeadBlocked?.();
    return {
      kind: 'wait',
      untilMs: finished.kind === 'attempted' ? finished.endedAtMs + retryDelayMs : deps.nowMs() + retryDelayMs,
    };
  }
}
