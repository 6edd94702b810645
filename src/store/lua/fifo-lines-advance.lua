-- Removes the head ARGV[2] and answers {1, the next head's id, its job} ({1} when the line is now
-- empty), in one round trip; the next head waits from ARGV[3] in the heads index (KEYS[5], line id
-- ARGV[4]), and an emptied line leaves it. Fenced by the lease and the head's id: a worker whose
-- lease expired (another took the line) can never remove what it no longer owns ({0}).
-- KEYS: the lease, the line's sorted set, jobs and sequence, the heads index. ARGV[1]: the token.
--@include fifo-head-of.lua

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
local ids = redis.call('ZRANGE', KEYS[2], 0, 0)
if ids[1] ~= ARGV[2] then return {0} end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
local following = headOf(KEYS[2], KEYS[3], KEYS[4])
if following then
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[4])
  return {1, following[1], following[2]}
end
redis.call('ZREM', KEYS[5], ARGV[4])
return {1}
