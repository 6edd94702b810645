import { DEFER_HORIZON_US } from '../domain/rate-limit.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

/** What the delivery worker needs: a send token for a rate-limited webhook, or when to look again. */
export interface SendRateLimiter {
  /** Takes a token for one send to `webhookId` at `ratePerSecond`; refused: how long to wait (ms, > 0). */
  take(webhookId: string, ratePerSecond: number): Promise<{ sent: true } | { sent: false; retryInMs: number }>;
}

// takeSendToken of src/domain/rate-limit.ts, step for step, on the bucket of one webhook (KEYS[1],
// a hash: tat, defer; in µs). The clock is Redis's own (TIME), one clock for every worker however
// theirs differ; ARGV[3] replaces it in the conformance test. Numbers stay below 2^53 µs and are
// written with %.0f: Lua's tostring would round them to 14 digits. Replies 0 when sent, else the
// wait in µs (always > 0). The hash expires once the bucket is full and the line of refusals ended.
const TAKE_LUA = `
local rate = tonumber(ARGV[1])
local now
if ARGV[3] ~= '' then now = tonumber(ARGV[3]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local interval = math.ceil(1000000 / rate)
local tolerance = interval * (rate - 1)
local state = redis.call('HMGET', KEYS[1], 'tat', 'defer')
local tat = math.max(tonumber(state[1] or now), now)
local defer = tonumber(state[2] or '0')
local reply = 0
if tat - now <= tolerance then
  tat = tat + interval
else
  local tokenAt = tat - tolerance
  local horizon = now + ${DEFER_HORIZON_US}
  local inLine = math.max(tokenAt, defer)
  if inLine < horizon then
    reply = inLine - now
    defer = inLine + interval
  else
    reply = math.max(tokenAt - now, math.floor(${DEFER_HORIZON_US} / 2 + tonumber(ARGV[2]) * ${DEFER_HORIZON_US} / 2))
    defer = horizon
  end
end
redis.call('HSET', KEYS[1], 'tat', string.format('%.0f', tat), 'defer', string.format('%.0f', defer))
redis.call('PEXPIRE', KEYS[1], math.ceil((math.max(tat, defer) - now) / 1000) + 1000)
return reply`;

/** The token buckets of rate-limited webhooks in Redis, shared by every worker: one script call per send. */
export class RedisSendRate implements SendRateLimiter {
  /** 0 when sent, else the wait in µs. */
  private readonly takeScript: ScriptCall<[bucket: string], [rate: number, random: number, nowUs: number | ''], number>;

  constructor(
    redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
    private readonly random: () => number = Math.random,
  ) {
    this.takeScript = defineScript(redis, { name: 'hooklineTakeSendToken', keys: 1, lua: TAKE_LUA });
  }

  async take(webhookId: string, ratePerSecond: number): Promise<{ sent: true } | { sent: false; retryInMs: number }> {
    const waitUs = await this.takeAt(webhookId, ratePerSecond, '');
    return waitUs === 0 ? { sent: true } : { sent: false, retryInMs: Math.ceil(waitUs / 1_000) };
  }

  /** The script's reply (0: sent, else the wait in µs) at `nowUs` instead of Redis's clock: for the conformance test. */
  takeAt(webhookId: string, ratePerSecond: number, nowUs: number | '', random = this.random()): Promise<number> {
    return this.takeScript([this.keys.deliveries.sendRate(webhookId)], ratePerSecond, random, nowUs);
  }
}
