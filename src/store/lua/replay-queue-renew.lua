-- KEYS: leases, tokens, owners. ARGV: running prefix, task id, token, now, leaseMs. Replies 1, or 0
-- when the token no longer holds the lease.
--@include replay-queue-steps.lua

local leases, tokens, owners = KEYS[1], KEYS[2], KEYS[3]
local runningPrefix, id, token = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', tokens, id) ~= token then return 0 end
local untilMs = string.format('%.0f', nowMs(ARGV[4]) + tonumber(ARGV[5]))
redis.call('ZADD', leases, untilMs, id)
redis.call('ZADD', runningPrefix .. redis.call('HGET', owners, id), untilMs, id)
return 1
