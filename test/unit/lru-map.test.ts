import { describe, expect, it } from 'vitest';
import { serverNameOf } from '../../src/delivery/outbound/connector.js';
import { LruMap } from '../../src/lib/lru-map.js';

describe('LruMap', () => {
  it('forgets the least recently used entry when a new one would pass the bound; a read makes an entry the newest', () => {
    const map = new LruMap<string, number>(3);
    map.set('a', 1);
    map.set('b', 2);
    map.set('c', 3);
    expect(map.get('a')).toBe(1);
    map.set('d', 4);
    expect(map.get('b')).toBeUndefined();
    expect([map.get('a'), map.get('c'), map.get('d')]).toEqual([1, 3, 4]);
    expect(map.size).toBe(3);
  });

  it('replaces an entry in place without evicting another, and deletes', () => {
    const map = new LruMap<string, number>(2);
    map.set('a', 1);
    map.set('b', 2);
    map.set('a', 10);
    expect([map.get('a'), map.get('b'), map.size]).toEqual([10, 2, 2]);
    expect(map.delete('a')).toBe(true);
    expect(map.delete('a')).toBe(false);
    expect(map.size).toBe(1);
  });

  it('agrees with a model of recency over many mixed operations, evicting oldest first and telling onEvict', () => {
    const evicted: string[] = [];
    const map = new LruMap<string, number>(50, (key) => evicted.push(key));
    // The model: keys oldest first.
    let model: string[] = [];
    const modelEvicted: string[] = [];
    // xorshift32: the same operations every run.
    let seed = 7;
    const next = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return seed >>> 0;
    };
    for (let i = 0; i < 20_000; i += 1) {
      const key = `k${next() % 120}`;
      const op = next() % 10;
      if (op < 5) {
        const had = model.includes(key);
        model = model.filter((k) => k !== key);
        if (!had && model.length >= 50) modelEvicted.push(model.shift()!);
        model.push(key);
        map.set(key, i);
      } else if (op < 9) {
        const found = map.get(key);
        expect(found !== undefined).toBe(model.includes(key));
        if (found !== undefined) model = [...model.filter((k) => k !== key), key];
      } else {
        expect(map.delete(key)).toBe(model.includes(key));
        model = model.filter((k) => k !== key);
      }
    }
    expect(map.size).toBe(model.length);
    expect(evicted).toEqual(modelEvicted);
    expect(evicted.length).toBeGreaterThan(1_000);
    expect([...map.values()].length).toBe(model.length);
  });

  it('keeps nothing with a bound of 0, and refuses a bound that is not an integer of 0 or more', () => {
    const none = new LruMap<string, number>(0);
    none.set('a', 1);
    expect([none.get('a'), none.size]).toEqual([undefined, 0]);
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => new LruMap(bad)).toThrow(RangeError);
  });
});

describe('serverNameOf (the name a TLS connection sends and keys its session under)', () => {
  it.each([
    ['example.com', 'example.com'],
    ['example.com:8443', 'example.com'],
    ['hooks.vendor.example:443', 'hooks.vendor.example'],
    ['127.0.0.1', undefined],
    ['127.0.0.1:8443', undefined],
    ['[::1]:8443', undefined],
    ['[2001:db8::1]', undefined],
    ['', undefined],
  ])('%j → %j', (host, name) => {
    expect(serverNameOf(host)).toBe(name);
  });
});
