-- Check and count in one step, so API processes racing for the same key's budget never both pass
-- the check and then overshoot it. An empty window always admits: a single batch larger than a
-- small limit would otherwise be refused forever. KEYS[1]: the subject's window of the current second
-- (it expires 2 s after its last count). ARGV: the cost to count, the limit. Returns 1 when
-- counted, 0 when refused.

local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local count = tonumber(ARGV[1])
if used > 0 and used + count > tonumber(ARGV[2]) then return 0 end
redis.call('INCRBY', KEYS[1], count)
redis.call('PEXPIRE', KEYS[1], 2000)
return 1
