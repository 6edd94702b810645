/**
 * The range replays' queue: how many a vendor may have, and which one a worker runs next. A range
 * replay holds a worker's slot for as long as it runs (paced, then waiting for its replays'
 * outcomes), and sends a delivery per event, so one vendor's replays must neither take every slot
 * nor pile up. The rules:
 * - a vendor holds at most `heldMax` replays, waiting or running (one more is refused, or a batch
 *   that would pass it, whole);
 * - at most `runningMax` of them run at once, whatever the slots free;
 * - a free slot goes to the vendors in turn (round robin over those with replays waiting), not to
 *   the oldest replay of all: a vendor that queued ten does not make another wait for ten;
 * - a running replay holds a lease its worker renews; one whose lease lapsed (its worker died, or
 *   its run failed) waits again at the head of its vendor's line, `triesMax` times at most, then is
 *   given up. A run that gives its slot back before its end (`yield`: its time slice is over) waits
 *   again at the head of its vendor's line too, without a try counted, and its vendor goes to the
 *   end of the turn order.
 * src/store/replay-queue.ts runs the same steps in Redis, for every worker at once; a conformance
 * test holds them to each other.
 */

export interface ReplayQueueLimits {
  /** Replays of one vendor running at once, at most. */
  runningMax: number;
  /** Replays of one vendor accepted and not ended (waiting or running), at most. */
  heldMax: number;
  /** Lapsed leases a replay may have before it is given up. */
  triesMax: number;
}

/** Lapsed leases taken back by one `take`, at most (the rest by the next ones): bounds a call's work. */
export const RECLAIMS_PER_TAKE = 10;

export interface ReplayQueueState {
  /** Vendors with replays waiting, in turn order: the first is looked at first. */
  ring: string[];
  /** Each vendor's waiting replays (task ids), oldest first; no entry: none. */
  waiting: Map<string, string[]>;
  /** Running replays by task id: their vendor, lease token and when the lease ends (ms). */
  running: Map<string, { vendorId: string; token: string; untilMs: number }>;
  /** Lapsed leases so far, by task id. */
  tries: Map<string, number>;
}

export function emptyReplayQueue(): ReplayQueueState {
  return { ring: [], waiting: new Map(), running: new Map(), tries: new Map() };
}

/** What a vendor holds: replays waiting, and running. */
export function heldBy(state: ReplayQueueState, vendorId: string): { waiting: number; running: number } {
  let running = 0;
  for (const replay of state.running.values()) if (replay.vendorId === vendorId) running += 1;
  return { waiting: state.waiting.get(vendorId)?.length ?? 0, running };
}

/**
 * Admits the vendor's new replays at the end of its line, all or none: refused (with what the
 * vendor holds) when they would take it past `heldMax`.
 */
export function admitReplays(
  state: ReplayQueueState,
  vendorId: string,
  taskIds: readonly string[],
  limits: Pick<ReplayQueueLimits, 'heldMax'>,
): { admitted: true } | { admitted: false; held: number } {
  const { waiting, running } = heldBy(state, vendorId);
  if (waiting + running + taskIds.length > limits.heldMax) return { admitted: false, held: waiting + running };
  for (const taskId of taskIds) waitAt(state, vendorId, taskId, 'end');
  return { admitted: true };
}

/**
 * The next replay to run at `nowMs`, leased to `token` until `nowMs + leaseMs`: first the lapsed
 * leases are taken back (RECLAIMS_PER_TAKE at most, soonest lapsed first; `dropped` names those
 * given up), then the vendors are looked at in turn, each once, and the first with a replay waiting
 * and fewer than `runningMax` running gives its oldest. The vendor goes to the end of the turn order
 * either way (one that could not run loses no replay, only its place).
 */
export function takeReplay(
  state: ReplayQueueState,
  nowMs: number,
  token: string,
  leaseMs: number,
  limits: ReplayQueueLimits,
): { taken: { taskId: string; vendorId: string } | undefined; dropped: string[] } {
  const dropped: string[] = [];
  const lapsed = [...state.running.entries()]
    .filter(([, replay]) => replay.untilMs <= nowMs)
    .sort(([a, x], [b, y]) => x.untilMs - y.untilMs || (a < b ? -1 : a > b ? 1 : 0))
    .slice(0, RECLAIMS_PER_TAKE);
  for (const [taskId, { vendorId }] of lapsed) {
    state.running.delete(taskId);
    const tries = (state.tries.get(taskId) ?? 0) + 1;
    if (tries > limits.triesMax) {
      state.tries.delete(taskId);
      dropped.push(taskId);
    } else {
      state.tries.set(taskId, tries);
      waitAt(state, vendorId, taskId, 'head');
    }
  }
  const turns = state.ring.length;
  for (let turn = 0; turn < turns; turn += 1) {
    const vendorId = state.ring.shift()!;
    state.ring.push(vendorId);
    if (heldBy(state, vendorId).running >= limits.runningMax) continue;
    const line = state.waiting.get(vendorId)!;
    const taskId = line.shift()!;
    if (line.length === 0) {
      state.waiting.delete(vendorId);
      state.ring.pop();
    }
    state.running.set(taskId, { vendorId, token, untilMs: nowMs + leaseMs });
    return { taken: { taskId, vendorId }, dropped };
  }
  return { taken: undefined, dropped };
}

/** Extends a running replay's lease; false when `token` no longer holds it (it lapsed and was taken back). */
export function renewReplay(
  state: ReplayQueueState,
  taskId: string,
  token: string,
  nowMs: number,
  leaseMs: number,
): boolean {
  const replay = state.running.get(taskId);
  if (replay?.token !== token) return false;
  replay.untilMs = nowMs + leaseMs;
  return true;
}

/**
 * Ends a run: `done` (the replay ended, and leaves the queue) or `yield` (it gives its slot back
 * and waits at the head of its vendor's line, its vendor at the end of the turn order). false when
 * `token` no longer holds the lease.
 */
export function releaseReplay(state: ReplayQueueState, taskId: string, token: string, how: 'done' | 'yield'): boolean {
  const replay = state.running.get(taskId);
  if (replay?.token !== token) return false;
  state.running.delete(taskId);
  if (how === 'done') {
    state.tries.delete(taskId);
    return true;
  }
  // The vendor just had a slice: it goes to the end of the turn order, behind those that waited.
  const at = state.ring.indexOf(replay.vendorId);
  if (at >= 0) state.ring.splice(at, 1);
  state.ring.push(replay.vendorId);
  const line = state.waiting.get(replay.vendorId);
  if (line === undefined) state.waiting.set(replay.vendorId, [taskId]);
  else line.unshift(taskId);
  return true;
}

/** Takes a waiting replay out of the queue (it was cancelled before it ran); false when it is not waiting. */
export function withdrawReplay(state: ReplayQueueState, taskId: string): boolean {
  for (const [vendorId, line] of state.waiting) {
    const at = line.indexOf(taskId);
    if (at < 0) continue;
    line.splice(at, 1);
    if (line.length === 0) {
      state.waiting.delete(vendorId);
      state.ring.splice(state.ring.indexOf(vendorId), 1);
    }
    state.tries.delete(taskId);
    return true;
  }
  return false;
}

/** Puts a replay in its vendor's line; a vendor whose line was empty joins the end of the turn order. */
function waitAt(state: ReplayQueueState, vendorId: string, taskId: string, where: 'head' | 'end'): void {
  const line = state.waiting.get(vendorId);
  if (line === undefined) {
    state.waiting.set(vendorId, [taskId]);
    state.ring.push(vendorId);
  } else if (where === 'head') line.unshift(taskId);
  else line.push(taskId);
}
