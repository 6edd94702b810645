-- The head of a line (KEYS: its sorted set, jobs, sequence, then the heads index; ARGV: the time,
-- the line id). A head without an entry in the index (its webhook was paused, or the line waits from
-- before the index) waits from now; an empty line has none. Returns {id, job JSON}, or false.
--@include fifo-head-of.lua

local found = headOf(KEYS[1], KEYS[2], KEYS[3])
if found then redis.call('ZADD', KEYS[4], 'NX', ARGV[1], ARGV[2])
else redis.call('ZREM', KEYS[4], ARGV[2]) end
return found
