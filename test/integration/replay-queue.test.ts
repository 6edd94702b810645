import { afterAll, describe, expect, it } from 'vitest';
import {
  admitReplays,
  emptyReplayQueue,
  releaseReplay,
  renewReplay,
  takeReplay,
  withdrawReplay,
  type ReplayQueueLimits,
  type ReplayQueueState,
} from '../../src/domain/replay-queue.js';
import { redisKeys, type RedisKeys } from '../../src/store/keys.js';
import { RedisReplayQueue } from '../../src/store/replay-queue.js';
import type { Redis } from '../../src/store/redis.js';
import { lcg } from '../helpers/random.js';
import { testRedis, type TestRedis } from '../helpers/redis.js';

const T0 = 1_764_000_000_000;
const LEASE_MS = 1_000;
const LIMITS: ReplayQueueLimits = { runningMax: 2, heldMax: 5, triesMax: 2 };
const VENDORS = ['v-a', 'v-b', 'v-c', 'v-d'];

/** The queue's state as Redis holds it, in the pure function's shape (plain values, to compare). */
async function stateIn(redis: Redis, keys: RedisKeys): Promise<object> {
  const q = keys.replayQueue;
  const waiting: Record<string, string[]> = {};
  for (const vendor of VENDORS) {
    const line = await redis.lrange(q.waiting(vendor), 0, -1);
    if (line.length > 0) waiting[vendor] = line;
  }
  const leases = await redis.zrange(q.leases, 0, -1, 'WITHSCORES');
  const running: Record<string, object> = {};
  for (let i = 0; i < leases.length; i += 2) {
    const taskId = leases[i]!;
    const vendorId = await redis.hget(q.owners, taskId);
    running[taskId] = { vendorId, token: await redis.hget(q.tokens, taskId), untilMs: Number(leases[i + 1]) };
    // The vendor's running set holds the same lease.
    expect(await redis.zscore(q.running(vendorId ?? ''), taskId)).toBe(leases[i + 1]);
  }
  return {
    ring: await redis.lrange(q.vendors, 0, -1),
    waiting,
    running,
    tries: Object.fromEntries(Object.entries(await redis.hgetall(q.tries)).map(([id, n]) => [id, Number(n)])),
  };
}

/** The pure function's state as plain values. */
function plain(state: ReplayQueueState): object {
  return {
    ring: state.ring,
    waiting: Object.fromEntries(state.waiting),
    running: Object.fromEntries(state.running),
    tries: Object.fromEntries(state.tries),
  };
}

describe('the range replays’ queue in Redis', () => {
  let t: TestRedis;
  afterAll(async () => {
    await t?.cleanup();
  });

  it('answers as the pure function does, step by step, over a random run of every operation (fixed clock)', async () => {
    t = testRedis();
    const keys = redisKeys(t.prefix);
    const queue = new RedisReplayQueue(t.redis, keys, LIMITS);
    const state = emptyReplayQueue();
    const random = lcg(20_240_601);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    let nowMs = T0;
    let next = 0;
    /** Tokens of the runs taken so far (some of them lapsed since). */
    const runs: { taskId: string; token: string }[] = [];
    const counts: Record<string, number> = {};
    for (let step = 0; step < 600; step += 1) {
      nowMs += Math.floor(random() * 400);
      const op = pick(['admit', 'admit', 'take', 'take', 'take', 'renew', 'done', 'yield', 'withdraw'] as const);
      counts[op] = (counts[op] ?? 0) + 1;
      let expected: unknown;
      let got: unknown;
      if (op === 'admit') {
        const vendor = pick(VENDORS);
        const ids = Array.from({ length: 1 + Math.floor(random() * 3) }, () => `task-${(next += 1)}`);
        expected = admitReplays(state, vendor, ids, LIMITS);
        got = await queue.admit(
          vendor,
          ids.map((taskId) => ({ taskId, job: `{"taskId":"${taskId}"}` })),
        );
      } else if (op === 'take') {
        const token = `token-${step}`;
        const pure = takeReplay(state, nowMs, token, LEASE_MS, LIMITS);
        expected = pure;
        const redisTake = await queue.take(token, LEASE_MS, nowMs);
        got = {
          taken:
            redisTake.taken === undefined
              ? undefined
              : { taskId: redisTake.taken.taskId, vendorId: redisTake.taken.vendorId },
          dropped: redisTake.dropped,
        };
        if (redisTake.taken !== undefined) {
          expect(redisTake.taken.job).toBe(`{"taskId":"${redisTake.taken.taskId}"}`);
          runs.push({ taskId: redisTake.taken.taskId, token });
        }
      } else if (op === 'withdraw') {
        const taskId = `task-${1 + Math.floor(random() * Math.max(1, next))}`;
        expected = withdrawReplay(state, taskId);
        got = await queue.withdraw(taskId);
      } else if (runs.length > 0) {
        const { taskId, token } = pick(runs);
        if (op === 'renew') {
          expected = renewReplay(state, taskId, token, nowMs, LEASE_MS);
          got = await queue.renew(taskId, token, LEASE_MS, nowMs);
        } else {
          expected = releaseReplay(state, taskId, token, op);
          got = await queue.release(taskId, token, op);
        }
      }
      expect({ step, op, answer: got }).toEqual({ step, op, answer: expected });
      if (op === 'admit' && !(expected as { admitted: boolean }).admitted) counts.refused = (counts.refused ?? 0) + 1;
      if (op === 'take') counts.dropped = (counts.dropped ?? 0) + (expected as { dropped: string[] }).dropped.length;
      expect({ step, state: await stateIn(t.redis, keys) }).toEqual({ step, state: plain(state) });
    }
    // Every operation ran, and the run went through refusals, lapses and give-ups.
    console.log(`replay queue conformance: ${JSON.stringify(counts)}`);
    for (const op of ['admit', 'take', 'renew', 'done', 'yield', 'withdraw']) expect(counts[op]).toBeGreaterThan(20);
    expect(counts.refused).toBeGreaterThan(0);
    expect(counts.dropped).toBeGreaterThan(0);
  });
});
