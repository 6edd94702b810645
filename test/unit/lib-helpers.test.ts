import { afterEach, describe, expect, it, vi } from 'vitest';
import { CappedMap } from '../../src/lib/capped-map.js';
import { ExpiringCopies } from '../../src/lib/expiring-copies.js';
import { enterAhead } from '../../src/lib/priority-line.js';
import { raceTimer, wakeableSleep } from '../../src/lib/timer-race.js';

describe('raceTimer', () => {
  afterEach(() => vi.useRealTimers());

  it("resolves with the work's value when it settles first, and leaves no timer behind", async () => {
    vi.useFakeTimers();
    const raced = raceTimer(Promise.resolve('done'), 1_000, 'late');
    await expect(raced).resolves.toBe('done');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('resolves with the timed-out value once the time passes first, however long the work takes', async () => {
    vi.useFakeTimers();
    let settled: string | undefined;
    void raceTimer(new Promise<string>(() => undefined), 1_000, 'late').then((value) => (settled = value));
    await vi.advanceTimersByTimeAsync(999);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe('late');
    expect(vi.getTimerCount()).toBe(0);
  });

  it("rejects with the work's error when it fails in time, and clears the timer", async () => {
    vi.useFakeTimers();
    await expect(raceTimer(Promise.reject(new Error('boom')), 1_000, 'late')).rejects.toThrow('boom');
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('wakeableSleep', () => {
  afterEach(() => vi.useRealTimers());

  it('answers true at once when woken, and clears its timer', async () => {
    vi.useFakeTimers();
    let wake: () => void = () => undefined;
    let woke: boolean | undefined;
    void wakeableSleep(1_000, (w) => (wake = w)).then((value) => (woke = value));
    await vi.advanceTimersByTimeAsync(10);
    expect(woke).toBeUndefined();
    wake();
    await Promise.resolve();
    expect(woke).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('answers false when the time runs out first; a late wake changes nothing', async () => {
    vi.useFakeTimers();
    let wake: () => void = () => undefined;
    let woke: boolean | undefined;
    void wakeableSleep(1_000, (w) => (wake = w)).then((value) => (woke = value));
    await vi.advanceTimersByTimeAsync(1_000);
    expect(woke).toBe(false);
    wake();
    await Promise.resolve();
    expect(woke).toBe(false);
  });
});

describe('CappedMap', () => {
  it('empties itself when a new key would go past the bound', () => {
    const map = new CappedMap<string, number>(2);
    map.set('a', 1).set('b', 2);
    map.set('c', 3);
    expect([...map.entries()]).toEqual([['c', 3]]);
  });

  it('replaces a known key in a full map without emptying it', () => {
    const map = new CappedMap<string, number>(2);
    map.set('a', 1).set('b', 2).set('a', 10);
    expect([...map.entries()]).toEqual([
      ['a', 10],
      ['b', 2],
    ]);
  });

  it('makeRoom empties the map unless a batch of that many fits', () => {
    const map = new CappedMap<string, number>(3);
    map.set('a', 1).set('b', 2);
    map.makeRoom(1);
    expect(map.size).toBe(2);
    map.makeRoom(2);
    expect(map.size).toBe(0);
  });
});

describe('ExpiringCopies', () => {
  it('serves a copy until it expires (fixed clock)', () => {
    const copies = new ExpiringCopies<string, string | undefined>(10);
    expect(copies.store(copies.ticket(), 'w1', undefined, 1_000)).toBe(true);
    expect(copies.fresh('w1', 999)).toEqual(expect.objectContaining({ value: undefined }));
    expect(copies.fresh('w1', 1_000)).toBeUndefined();
  });

  it('refuses what a read started before a change brings back, and accepts a read started after it', () => {
    const copies = new ExpiringCopies<string, string>(10);
    const before = copies.ticket();
    copies.forget('w1');
    expect(copies.store(before, 'w1', 'stale', 1_000)).toBe(false);
    expect(copies.fresh('w1', 0)).toBeUndefined();
    expect(copies.store(copies.ticket(), 'w1', 'current', 1_000)).toBe(true);
    expect(copies.fresh('w1', 0)?.value).toBe('current');
  });

  it('clear forgets every copy and refuses reads under way; storeMany stores a batch whole or not at all', () => {
    const copies = new ExpiringCopies<string, number>(10);
    const before = copies.ticket();
    copies.storeMany(before, ['a', 'b'], (key) => key.length, 1_000);
    copies.clear();
    expect(copies.fresh('a', 0)).toBeUndefined();
    expect(copies.storeMany(before, ['c'], () => 1, 1_000)).toBe(false);
    expect(copies.fresh('c', 0)).toBeUndefined();
  });

  it('stays within its bound: a batch that does not fit empties it first, and the batch stays whole', () => {
    const copies = new ExpiringCopies<string, number>(3);
    copies.storeMany(copies.ticket(), ['a', 'b'], () => 1, 1_000);
    copies.storeMany(copies.ticket(), ['c', 'd'], () => 2, 1_000);
    expect(['a', 'b', 'c', 'd'].map((key) => copies.fresh(key, 0)?.value)).toEqual([undefined, undefined, 2, 2]);
  });
});

describe('enterAhead (a line where high-priority items go first)', () => {
  it('puts each high item behind the high ones and ahead of the first normal one; each class keeps its order', () => {
    const line: string[] = ['n1', 'n2'];
    const isNormal = (item: string) => item.startsWith('n');
    enterAhead(line, 'h1', isNormal);
    line.push('n3');
    enterAhead(line, 'h2', isNormal);
    expect(line).toEqual(['h1', 'h2', 'n1', 'n2', 'n3']);
    const highs: string[] = [];
    enterAhead(highs, 'h1', isNormal);
    expect(highs).toEqual(['h1']);
  });
});
