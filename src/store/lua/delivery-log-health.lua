-- What an operator view needs of one webhook, in one round trip: when its current run of failures
-- began, its dead-letter count, and the newest of its last 20 deliveries that has an outcome.
-- KEYS: its failing-since key, dead-letter set, recent list, the event log's status hash.
-- ARGV[1]: its record key prefix. Returns {since ('' when not failing), dead letters, and when a
-- delivery has an outcome: that outcome, its status code, its time}.
--@include delivery-row.lua

local since = redis.call('GET', KEYS[1]) or ''
local dead = redis.call('ZCARD', KEYS[2])
for _, id in ipairs(redis.call('ZREVRANGE', KEYS[3], 0, 19)) do
  local f = rowOf(ARGV[1], KEYS[4], id)
  if f and f[5] and f[5] ~= '' then return {since, dead, f[5], f[6] or '', f[7] or ''} end
end
return {since, dead}
