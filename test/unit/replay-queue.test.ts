import { describe, expect, it } from 'vitest';
import {
  admitReplays,
  emptyReplayQueue,
  heldBy,
  releaseReplay,
  renewReplay,
  takeReplay,
  withdrawReplay,
  type ReplayQueueLimits,
  type ReplayQueueState,
} from '../../src/domain/replay-queue.js';

const T0 = 1_764_000_000_000;
const LEASE_MS = 1_000;
const LIMITS: ReplayQueueLimits = { runningMax: 2, heldMax: 4, triesMax: 2 };

/** Admits the vendor's replays `ids`. */
function admit(state: ReplayQueueState, vendor: string, ids: string[], limits = LIMITS) {
  return admitReplays(state, vendor, ids, limits);
}

/** Takes `n` times at `nowMs`: the task ids taken (undefined: none may run). */
function takeMany(state: ReplayQueueState, n: number, nowMs = T0, limits = LIMITS): (string | undefined)[] {
  return Array.from({ length: n }, (_, i) => takeReplay(state, nowMs, `token-${i}`, LEASE_MS, limits).taken?.taskId);
}

describe('the range replays’ queue (caps per vendor, vendors in turn)', () => {
  it('admits a vendor’s replays up to heldMax, waiting and running together; a batch past it is refused whole', () => {
    const state = emptyReplayQueue();
    expect(admit(state, 'a', ['a1', 'a2', 'a3'])).toEqual({ admitted: true });
    takeMany(state, 1);
    expect(heldBy(state, 'a')).toEqual({ waiting: 2, running: 1 });
    expect(admit(state, 'a', ['a4', 'a5'])).toEqual({ admitted: false, held: 3 });
    expect(heldBy(state, 'a')).toEqual({ waiting: 2, running: 1 });
    expect(admit(state, 'a', ['a4'])).toEqual({ admitted: true });
    expect(admit(state, 'a', ['a5'])).toEqual({ admitted: false, held: 4 });
    // Another vendor's cap is its own.
    expect(admit(state, 'b', ['b1', 'b2', 'b3', 'b4'])).toEqual({ admitted: true });
  });

  it('runs at most runningMax of a vendor at once, and gives free slots to the vendors in turn', () => {
    const limits = { ...LIMITS, heldMax: 10 };
    const state = emptyReplayQueue();
    admit(state, 'a', ['a1', 'a2', 'a3', 'a4', 'a5'], limits);
    admit(state, 'b', ['b1', 'b2'], limits);
    admit(state, 'c', ['c1'], limits);
    // A FIFO over every replay would run a1…a5 first; in turn: a, b, c, a, b, then a is at its cap.
    expect(takeMany(state, 7, T0, limits)).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', undefined, undefined]);
    expect(heldBy(state, 'a')).toEqual({ waiting: 3, running: 2 });
    // a1 ends: a's next runs.
    expect(releaseReplay(state, 'a1', 'token-0', 'done')).toBe(true);
    expect(takeMany(state, 1, T0, limits)).toEqual(['a3']);
  });

  it('a vendor that comes later waits at most one turn of each vendor ahead, however many those queued', () => {
    const limits = { ...LIMITS, runningMax: 10, heldMax: 100 };
    const state = emptyReplayQueue();
    admit(
      state,
      'a',
      Array.from({ length: 50 }, (_, i) => `a${i + 1}`),
      limits,
    );
    expect(takeMany(state, 2, T0, limits)).toEqual(['a1', 'a2']);
    admit(state, 'b', ['b1'], limits);
    expect(takeMany(state, 2, T0, limits)).toEqual(['a3', 'b1']);
  });

  it('a run that gives its slot back waits at the head of its line, and its vendor goes behind the others', () => {
    // A worker with two slots, both running a's replays when b's comes: b waits for a slot.
    const state = emptyReplayQueue();
    admit(state, 'a', ['a1', 'a2', 'a3']);
    expect(takeMany(state, 2)).toEqual(['a1', 'a2']);
    admit(state, 'b', ['b1']);
    expect(state.ring).toEqual(['a', 'b']);
    // a1's slice ends: the slot goes to b, not back to a (a would be first in turn otherwise).
    expect(releaseReplay(state, 'a1', 'token-0', 'yield')).toBe(true);
    expect(state.ring).toEqual(['b', 'a']);
    expect(state.waiting.get('a')).toEqual(['a1', 'a3']);
    expect(takeMany(state, 1)).toEqual(['b1']);
    // a2's slice ends with nobody else waiting: a goes on, with the replay at the head of its line
    // (started replays go on before a3 starts), then a1 with the next free slot.
    expect(releaseReplay(state, 'a2', 'token-1', 'yield')).toBe(true);
    expect(state.waiting.get('a')).toEqual(['a2', 'a1', 'a3']);
    expect(takeMany(state, 2)).toEqual(['a2', 'a1']);
    // A yield counts no try.
    expect(state.tries.size).toBe(0);
  });

  it('a lapsed lease is taken back (its replay at the head of its line), and given up after triesMax lapses', () => {
    const state = emptyReplayQueue();
    admit(state, 'a', ['a1', 'a2']);
    expect(takeMany(state, 1)).toEqual(['a1']);
    // Renewed within the lease: still running at T0 + 1.5 s.
    expect(renewReplay(state, 'a1', 'token-0', T0 + 500, LEASE_MS)).toBe(true);
    expect(takeReplay(state, T0 + 1_499, 'x', LEASE_MS, { ...LIMITS, runningMax: 1 }).taken).toBeUndefined();
    // Lapsed at T0 + 1.5 s: taken back, and taken again first (the head of a's line).
    let take = takeReplay(state, T0 + 1_500, 'second', LEASE_MS, LIMITS);
    expect(take).toEqual({ taken: { taskId: 'a1', vendorId: 'a' }, dropped: [] });
    expect(state.tries.get('a1')).toBe(1);
    // The first run's token no longer holds it.
    expect(renewReplay(state, 'a1', 'token-0', T0 + 1_600, LEASE_MS)).toBe(false);
    expect(releaseReplay(state, 'a1', 'token-0', 'done')).toBe(false);
    take = takeReplay(state, T0 + 3_000, 'third', LEASE_MS, LIMITS);
    expect(take.taken?.taskId).toBe('a1');
    expect(state.tries.get('a1')).toBe(2);
    // A third lapse passes triesMax: given up, and a2 runs.
    take = takeReplay(state, T0 + 5_000, 'fourth', LEASE_MS, { ...LIMITS, runningMax: 1 });
    expect(take).toEqual({ taken: { taskId: 'a2', vendorId: 'a' }, dropped: ['a1'] });
    expect(state.tries.has('a1')).toBe(false);
    expect(heldBy(state, 'a')).toEqual({ waiting: 0, running: 1 });
  });

  it('a waiting replay is withdrawn (cancelled); a running one is not', () => {
    const state = emptyReplayQueue();
    admit(state, 'a', ['a1', 'a2']);
    admit(state, 'b', ['b1']);
    takeMany(state, 1);
    expect(withdrawReplay(state, 'a1')).toBe(false);
    expect(withdrawReplay(state, 'a2')).toBe(true);
    expect(state.ring).toEqual(['b']);
    expect(state.waiting.has('a')).toBe(false);
    expect(withdrawReplay(state, 'a2')).toBe(false);
    expect(heldBy(state, 'a')).toEqual({ waiting: 0, running: 1 });
  });
});
