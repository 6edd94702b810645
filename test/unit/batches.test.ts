import { describe, expect, it } from 'vitest';
import { BATCH_BYTES_MAX, BATCH_MAX, batchesOf } from '../../src/delivery/jobs.js';

const delivery = (bytes: number, n: number) => ({ n, body: 'x'.repeat(bytes) });

describe('batchesOf', () => {
  it('cuts at BATCH_MAX deliveries when bodies are small', () => {
    const batches = batchesOf(Array.from({ length: 250 }, (_, n) => delivery(10, n)));
    expect(batches.map((b) => b.length)).toEqual([BATCH_MAX, BATCH_MAX, 50]);
    expect(batches.flat().map((d) => d.n)).toEqual(Array.from({ length: 250 }, (_, n) => n));
  });

  it('cuts before a batch’s bodies pass BATCH_BYTES_MAX, so its data stays a regular-sized string', () => {
    const batches = batchesOf(Array.from({ length: 200 }, (_, n) => delivery(1_024, n)));
    for (const batch of batches)
      expect(JSON.stringify({ deliveries: batch }).length).toBeLessThanOrEqual(BATCH_BYTES_MAX);
    // Full batches, but for the last.
    for (const batch of batches.slice(0, -1)) expect(batch.length).toBeGreaterThan(50);
    expect(batches.flat().map((d) => d.n)).toEqual(Array.from({ length: 200 }, (_, n) => n));
  });

  it('puts a body larger than the cap in a batch of its own', () => {
    expect(batchesOf([delivery(10, 0), delivery(200_000, 1), delivery(10, 2)]).map((b) => b.map((d) => d.n))).toEqual([
      [0],
      [1],
      [2],
    ]);
    expect(batchesOf([])).toEqual([]);
  });
});
