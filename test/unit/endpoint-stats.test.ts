import { describe, expect, it } from 'vitest';
import { lcg } from '../helpers/random.js';
import {
  LATENCY_BOUNDS_MS,
  latencyBucket,
  percentileMs,
  quarterExpiresAtMs,
  slotExpiresAtMs,
  statsLayout,
} from '../../src/store/endpoint-stats.js';

const at = (hh: number, mm: number, ss = 0, day = 24) => Date.UTC(2026, 10, day, hh, mm, ss);
const minuteAt = (hh: number, mm: number, day = 24) => at(hh, mm, 0, day) / 60_000;
const hourAt = (hh: number, day = 24) => at(hh, 0, 0, day) / 3_600_000;
/** Quarter-days start at 00:00, 06:00, 12:00 and 18:00 UTC. */
const quarterAt = (hh: number, day = 24) => hourAt(hh, day) / 6;

/** Counts with `n` in bucket `i` for each [i, n]. */
function buckets(...entries: [number, number][]): number[] {
  const counts = new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);
  for (const [i, n] of entries) counts[i] = n;
  return counts;
}

/** The `q` quantile by nearest rank: the value at rank ⌈q·n⌉ of the sorted samples. */
function nearestRank(samples: readonly number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

describe('endpoint stats: latency buckets', () => {
  it('puts a latency in the first bucket whose bound is at least it, and past 30 s in the unbounded one', () => {
    const vectors: [number, number][] = [
      [0, 0],
      [5, 0],
      [5.2, 1],
      [10, 1],
      [10.01, 2],
      [99, 4],
      [250, 5],
      [1_000, 7],
      [15_000, 11],
      [30_000, 11],
      [30_000.5, 12],
      [120_000, 12],
    ];
    expect(vectors.map(([ms]) => latencyBucket(ms))).toEqual(vectors.map(([, bucket]) => bucket));
    expect(LATENCY_BOUNDS_MS).toHaveLength(12);
  });
});

describe('endpoint stats: percentiles from buckets', () => {
  it('interpolates within the bucket that holds the rank, from 0 in the first and at its lower bound in the unbounded one', () => {
    expect(percentileMs(buckets(), 0.5)).toBeNull();
    // One sample in (25, 50]: the rank sits half way (p50) or 95 % of the way (p95) through the bucket.
    expect(percentileMs(buckets([3, 1]), 0.5)).toBe(37.5);
    expect(percentileMs(buckets([3, 1]), 0.95)).toBe(48.75);
    // 50 in [0, 5] and 50 in (50, 100]: p50 is the first bucket's top, p95 90 % into the other.
    expect(percentileMs(buckets([0, 50], [4, 50]), 0.5)).toBe(5);
    expect(percentileMs(buckets([0, 50], [4, 50]), 0.95)).toBe(95);
    // 19 fast and one in (10 s, 30 s]: p95 stays fast, p99 is 80 % into the slow bucket.
    expect(percentileMs(buckets([0, 19], [11, 1]), 0.95)).toBe(5);
    expect(percentileMs(buckets([0, 19], [11, 1]), 0.99)).toBeCloseTo(26_000, 6);
    expect(percentileMs(buckets([12, 10]), 0.5)).toBe(30_000);
    expect(percentileMs(buckets([12, 10]), 0.95)).toBe(30_000);
  });

  it('lands in the bucket of the true percentile (the stated error bound), over fixed sample sets', () => {
    const random = lcg(13);
    for (let set = 0; set < 200; set += 1) {
      const size = 1 + Math.floor(random() * 300);
      // Log-uniform from 0.5 ms to 60 s, the range receivers answer in.
      const samples = Array.from({ length: size }, () => Math.round(0.5 * 120_000 ** random() * 10) / 10);
      const counts = buckets();
      for (const ms of samples) counts[latencyBucket(ms)]! += 1;
      for (const q of [0.5, 0.95]) {
        const truth = nearestRank(samples, q);
        const estimate = percentileMs(counts, q)!;
        const i = latencyBucket(truth);
        const lower = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!;
        const upper = LATENCY_BOUNDS_MS[i] ?? Infinity;
        expect({ set, q, estimate: Math.max(lower, Math.min(upper, estimate)) }).toEqual({ set, q, estimate });
      }
    }
  });
});

describe('endpoint stats: window and key layout (fixed clock)', () => {
  it('covers the last 60 minutes, the 10-minute slots they fall in, and the current hour with the 24 before it in five quarter-days', () => {
    const layout = statsLayout(at(10, 5, 30));
    expect(layout.minutes).toHaveLength(60);
    expect(layout.minutes[0]).toBe(minuteAt(9, 6));
    expect(layout.minutes.at(-1)).toBe(minuteAt(10, 5));
    expect(layout.minutes.every((m, i) => i === 0 || m === layout.minutes[i - 1]! + 1)).toBe(true);
    // 09:06 is in the 09:00 slot: seven slots, 09:00 to 10:00.
    expect(layout.slots).toEqual(Array.from({ length: 7 }, (_, i) => minuteAt(9, 0) / 10 + i));
    expect(layout.hours).toHaveLength(25);
    expect(layout.hours[0]).toBe(hourAt(10, 23));
    expect(layout.hours.at(-1)).toBe(hourAt(10));
    // 10:00 on the 23rd is in its 06:00 quarter; 10:00 on the 24th in the 24th's.
    expect(layout.quarters).toEqual([
      quarterAt(6, 23),
      quarterAt(12, 23),
      quarterAt(18, 23),
      quarterAt(0),
      quarterAt(6),
    ]);
  });

  it('needs only six slots when the hour starts on a slot boundary', () => {
    const layout = statsLayout(at(10, 9, 59));
    expect(layout.minutes[0]).toBe(minuteAt(9, 10));
    expect(layout.slots).toEqual(Array.from({ length: 6 }, (_, i) => minuteAt(9, 10) / 10 + i));
    // The same layout a millisecond before 10:10; a new minute a millisecond after.
    expect(statsLayout(at(10, 10) - 1)).toEqual(layout);
    expect(statsLayout(at(10, 10)).minutes.at(-1)).toBe(minuteAt(10, 10));
  });

  it('keeps a slot until no hour window reaches into it, and a quarter-day until no day window does (plus 2 minutes of clock skew)', () => {
    const slot = minuteAt(10, 0) / 10;
    expect(slotExpiresAtMs(slot)).toBe(at(11, 12));
    // The last read that needs the 10:00 slot (minutes 10:00-10:09) is in minute 11:08, whose hour starts at 10:09.
    expect(statsLayout(at(11, 9) - 1).slots[0]).toBe(slot);
    expect(statsLayout(at(11, 9)).slots[0]).toBe(slot + 1);
    expect(slotExpiresAtMs(slot)).toBeGreaterThan(at(11, 9));
    // The last day window that holds 11:00 on the 24th, the 06:00 quarter's last hour, is read at 11:59:59 on the 25th.
    expect(quarterExpiresAtMs(quarterAt(6))).toBe(at(12, 2, 0, 25));
    expect(statsLayout(at(12, 0, 0, 25) - 1).quarters[0]).toBe(quarterAt(6));
    expect(statsLayout(at(12, 0, 0, 25)).quarters[0]).toBe(quarterAt(12));
  });
});
