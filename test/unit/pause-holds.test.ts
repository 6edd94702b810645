import { describe, expect, it } from 'vitest';
import { retryWindowMs } from '../../src/delivery/classify.js';
import { pauseHoldEndMs, PauseHolds } from '../../src/delivery/pause-holds.js';
import type { HeldJob } from '../../src/store/held-deliveries.js';

const S = 1_000;
const M = 60 * S;
const H = 60 * M;
/** The default schedule: 0, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h. */
const SCHEDULE = [0, 5 * S, 5 * M, 30 * M, 2 * H, 5 * H, 10 * H, 14 * H, 20 * H, 24 * H];
const NOW = Date.UTC(2025, 0, 2, 3, 4, 5);

describe('the retry window and the pause hold', () => {
  it('sums the delays still ahead: the whole schedule before the first attempt, nothing after the last', () => {
    expect(retryWindowMs(SCHEDULE)).toBe(272_105 * S);
    expect(retryWindowMs(SCHEDULE, 9)).toBe(24 * H);
    expect(retryWindowMs(SCHEDULE, 10)).toBe(0);
    expect(retryWindowMs([0])).toBe(0);
  });

  it('holds a paused webhook’s delivery to the end of its retry window counted from its acceptance (about 3.15 days by default)', () => {
    expect(pauseHoldEndMs({ acceptedAtMs: NOW }, SCHEDULE)).toBe(NOW + 272_105 * S);
    expect(pauseHoldEndMs({ acceptedAtMs: NOW }, [0, 300, 300])).toBe(NOW + 600);
    // A one-attempt schedule has no window: a delivery accepted while paused is not held at all.
    expect(pauseHoldEndMs({ acceptedAtMs: NOW }, [0])).toBe(NOW);
  });
});

describe('PauseHolds.release', () => {
  /** An in-memory index that serves its notes `pageSize` at a time, and a log of what was done. */
  function world(noted: HeldJob[], pageSize = 2) {
    const done: string[] = [];
    let index = [...noted];
    const holds = new PauseHolds({
      index: {
        add: async () => undefined,
        read: async () => index.slice(0, pageSize),
        remove: async (_webhookId, jobs) => {
          index = index.filter((job) => !jobs.includes(job));
        },
      },
      queues: {
        promote: async (refs) =>
          void done.push(...refs.map((r) => `promote ${r.webhookId} ${r.parked ? 'p' : 's'}:${r.jobId}`)),
      },
      lines: { wake: async (webhookId, nowMs) => void done.push(`wake ${webhookId} at ${nowMs}`) },
      nowMs: () => NOW,
    });
    return { holds, done, left: () => index };
  }

  it('promotes the hold’s own jobs and every job noted, page by page, forgets them, and makes the FIFO line due now', async () => {
    const noted = [
      { jobId: 'a', parked: false },
      { jobId: 'b', parked: true },
      { jobId: 'c', parked: false },
    ];
    const { holds, done, left } = world(noted);
    await holds.release('w1', [{ jobId: 'own', parked: true }]);
    expect(done.sort()).toEqual(
      [`promote w1 p:b`, `promote w1 p:own`, `promote w1 s:a`, `promote w1 s:c`, `wake w1 at ${NOW}`].sort(),
    );
    expect(left()).toEqual([]);
  });

  it('with nothing held, only makes the line due (a webhook without a line is left as it is by the store)', async () => {
    const { holds, done } = world([]);
    await holds.release('w1');
    expect(done).toEqual([`wake w1 at ${NOW}`]);
  });
});
