import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { StorageGate } from '../../src/delivery/storage-gate.js';

describe('StorageGate', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('closes on a failure, probes until storage answers, then opens; a job from before the closing may not send', async () => {
    const answers = [false, false, true];
    const probes: number[] = [];
    const changes: boolean[] = [];
    const gate = new StorageGate(
      async () => {
        probes.push(Date.now());
        return answers.shift() ?? true;
      },
      (open) => changes.push(open),
      100,
    );
    const before = gate.epoch;
    expect(gate.allows(before)).toBe(true);

    gate.close();
    gate.close();
    expect(gate.open).toBe(false);
    expect(gate.epoch).toBe(before + 1);
    expect(gate.allows(before)).toBe(false);
    let opened = false;
    void gate.whenOpen().then(() => (opened = true));

    await vi.advanceTimersByTimeAsync(250);
    expect(probes).toHaveLength(2);
    expect(gate.open).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(probes).toHaveLength(3);
    expect(gate.open).toBe(true);
    expect(opened).toBe(true);
    expect(changes).toEqual([false, true]);
    // Open again, but a job that started before the closing must leave its work to a re-run.
    expect(gate.allows(before)).toBe(false);
    expect(gate.allows(gate.epoch)).toBe(true);
    // No probes while open.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(probes).toHaveLength(3);
  });

  it('probes at once when told the connection is ready again, and stops probing when stopped', async () => {
    let answer = false;
    let probes = 0;
    const gate = new StorageGate(
      async () => {
        probes += 1;
        return answer;
      },
      undefined,
      10_000,
    );
    gate.close();
    answer = true;
    gate.check();
    await vi.advanceTimersByTimeAsync(0);
    expect(probes).toBe(1);
    expect(gate.open).toBe(true);

    answer = false;
    gate.close();
    gate.stop();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(probes).toBe(1);
    expect(gate.open).toBe(false);
  });
});
