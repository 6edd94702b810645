import { DEFER_HORIZON_US, SLOT_US, WINDOW_SLOTS } from '../domain/rate-limit.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScript, type ScriptCall } from './scripts.js';

/** What the delivery worker needs: a send token for a rate-limited webhook, or when to look again. */
export interface SendRateLimiter {
  /** Takes a token for one send to `webhookId` at `ratePerSecond`; refused: how long to wait (ms, > 0). */
  take(webhookId: string, ratePerSecond: number): Promise<{ sent: true } | { sent: false; retryInMs: number }>;
}

// takeSendToken of src/domain/rate-limit.ts, step for step, on the window of one webhook (KEYS[1],
// a hash: a field per 50 ms slot with its sends, named by the slot's number, and `defer`; in µs).
// The clock is Redis's own (TIME), one clock for every worker however theirs differ; ARGV[3]
// replaces it in the conformance test. Numbers stay below 2^53 µs and are written with %.0f: Lua's
// tostring would round them to 14 digits. Replies 0 when sent, else the wait in µs (always > 0).
// The hash expires once its slots have left the window and the line of refusals ended.
const TAKE_LUA = `
local rate = tonumber(ARGV[1])
local now
if ARGV[3] ~= '' then now = tonumber(ARGV[3]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local slot = math.floor(now / ${SLOT_US})
local oldest = slot - ${WINDOW_SLOTS}
local fields = redis.call('HGETALL', KEYS[1])
local counts = {}
local total = 0
local defer = 0
local stale = {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if name == 'defer' then defer = tonumber(fields[i + 1]) else
    local at = tonumber(name)
    if at < oldest then stale[#stale + 1] = name else
      local count = tonumber(fields[i + 1])
      counts[at] = count
      total = total + count
    end
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
local reply = 0
if total < rate then
  redis.call('HINCRBY', KEYS[1], string.format('%.0f', slot), 1)
else
  local freeAt = (slot + 1) * ${SLOT_US}
  local left = total
  for at = oldest, slot do
    left = left - (counts[at] or 0)
    if left < rate then
      freeAt = (at + ${WINDOW_SLOTS} + 1) * ${SLOT_US}
      break
    end
  end
  local horizon = now + ${DEFER_HORIZON_US}
  local inLine = math.max(freeAt, defer)
  if inLine < horizon then
    reply = inLine - now
    defer = inLine + math.ceil(${(WINDOW_SLOTS + 1) * SLOT_US} / rate)
  else
    reply = math.max(freeAt - now, math.floor(${DEFER_HORIZON_US} / 2 + tonumber(ARGV[2]) * ${DEFER_HORIZON_US} / 2))
    defer = horizon
  end
  redis.call('HSET', KEYS[1], 'defer', string.format('%.0f', defer))
end
redis.call('PEXPIRE', KEYS[1], math.ceil((math.max((slot + ${WINDOW_SLOTS} + 1) * ${SLOT_US}, defer) - now) / 1000) + 1000)
return reply`;

/** The send windows of rate-limited webhooks in Redis, shared by every worker: one script call per send. */
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
