import { ReplyError } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { isRedisError, isRedisUnavailable } from '../../src/store/redis.js';

/** A Redis error reply as ioredis hands it over (its class comes untyped). */
const reply = (message: string): Error => new (ReplyError as new (text: string) => Error)(message);
/** An error of ioredis's own class `name` (its classes name themselves after their constructor). */
const named = (name: string, message: string) => Object.assign(new Error(message), { name });

describe('isRedisUnavailable: storage cannot take this now (503 storage_unavailable, stream batches retried)', () => {
  it('takes what a cluster says while a master fails over or a slot map is stale', () => {
    for (const error of [
      // ioredis retried on the dead master's closed connection until it gave up (the 500s of issue 22).
      new Error('Too many Cluster redirections. Last error: Error: Connection is closed.'),
      // A read blocked on a master that a failover turned into a replica.
      reply('UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)'),
      named('ClusterAllFailedError', 'Failed to refresh slots cache.'),
      new Error('None of startup nodes is available'),
      new Error(
        'the Redis Cluster is reconfiguring: no connection to a master serving slot 4065 (the map names 127.0.0.1:7001)',
      ),
      reply('CLUSTERDOWN The cluster is down'),
      reply('TRYAGAIN Multiple keys request during rehashing of slot'),
    ]) {
      expect(isRedisUnavailable(error), error.message).toBe(true);
      expect(isRedisError(error), error.message).toBe(true);
    }
  });

  it('leaves out Redis errors that a retry does not cure, and errors of the code that called Redis', () => {
    const wrongType = reply('WRONGTYPE Operation against a key holding the wrong kind of value');
    expect(isRedisUnavailable(wrongType)).toBe(false);
    expect(isRedisError(wrongType)).toBe(true);
    expect(isRedisError(new Error('Command timed out'))).toBe(true);
    for (const error of [
      new TypeError("Cannot read properties of undefined (reading 'gpus')"),
      new Error('queue unavailable'),
      new RangeError('Maximum call stack size exceeded'),
    ]) {
      expect(isRedisUnavailable(error), error.message).toBe(false);
      expect(isRedisError(error), error.message).toBe(false);
    }
  });
});
