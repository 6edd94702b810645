-- KEYS: vendors, leases, tokens, owners, tries, jobs. ARGV: waiting prefix, running prefix, now,
-- token, leaseMs, runningMax, triesMax, RECLAIMS_PER_TAKE (lapsed leases taken back at most). Replies {task id, vendor, job, dropped ids}; '' for the
-- first three when nothing may run.
--@include replay-queue-steps.lua

local vendors, leases, tokens, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local waitingPrefix, runningPrefix = ARGV[1], ARGV[2]
local now, token, leaseMs = nowMs(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local runningMax, triesMax, reclaimsMax = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local dropped = {}
local lapsed = redis.call('ZRANGEBYSCORE', leases, '-inf', string.format('%.0f', now), 'LIMIT', 0, reclaimsMax)
for _, id in ipairs(lapsed) do
  local vendor = redis.call('HGET', owners, id)
  redis.call('ZREM', leases, id)
  redis.call('HDEL', tokens, id)
  redis.call('ZREM', runningPrefix .. vendor, id)
  if redis.call('HINCRBY', tries, id, 1) > triesMax then
    redis.call('HDEL', tries, id)
    redis.call('HDEL', owners, id)
    redis.call('HDEL', jobs, id)
    dropped[#dropped + 1] = id
  else
    wait(vendors, waitingPrefix .. vendor, vendor, id, 'head')
  end
end
local turns = redis.call('LLEN', vendors)
for _ = 1, turns do
  local vendor = redis.call('LMOVE', vendors, vendors, 'LEFT', 'RIGHT')
  if redis.call('ZCARD', runningPrefix .. vendor) < runningMax then
    local line = waitingPrefix .. vendor
    local id = redis.call('LPOP', line)
    if redis.call('LLEN', line) == 0 then redis.call('RPOP', vendors) end
    local untilMs = string.format('%.0f', now + leaseMs)
    redis.call('ZADD', runningPrefix .. vendor, untilMs, id)
    redis.call('ZADD', leases, untilMs, id)
    redis.call('HSET', tokens, id, token)
    return {id, vendor, redis.call('HGET', jobs, id) or '', dropped}
  end
end
return {'', '', '', dropped}
