import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { keySlot, slotGroups } from '../../src/store/redis.js';

// Neither connects: slotGroups only asks which kind of client it is given.
const server = new Redis({ lazyConnect: true });
const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
afterAll(() => {
  server.disconnect();
  cluster.disconnect();
});

const items = ['{a}:1', '{b}:1', '{a}:2', '{a}:3', '{b}:2'];
const key = (item: string) => item;

describe('slotGroups', () => {
  it('gives one server every item in one group, in order, or groups of at most max', () => {
    expect(slotGroups(server, items, key)).toEqual([items]);
    expect(slotGroups(server, items, key, 2)).toEqual([['{a}:1', '{b}:1'], ['{a}:2', '{a}:3'], ['{b}:2']]);
    expect(slotGroups(server, [], key, 2)).toEqual([]);
  });

  it('groups a cluster’s items by slot, in order, each slot in groups of at most max', () => {
    expect(keySlot('{a}:1')).not.toBe(keySlot('{b}:1'));
    expect(slotGroups(cluster, items, key)).toEqual([
      ['{a}:1', '{a}:2', '{a}:3'],
      ['{b}:1', '{b}:2'],
    ]);
    expect(slotGroups(cluster, items, key, 2)).toEqual([['{a}:1', '{a}:2'], ['{a}:3'], ['{b}:1', '{b}:2']]);
  });
});
