-- Fenced by the lease: the ready entry (ARGV[3], the line id) at ARGV[2] (empty: removed when the
-- line is empty, else due now), then the lease deleted. A head held for its webhook's pause
-- (ARGV[4] = 'paused') leaves the heads index (KEYS[4]); an empty line left it when it emptied.
-- KEYS: the lease, the ready set, the line's sorted set, the heads index. ARGV[1]: the token.
-- Returns 1, or 0 when the lease is another's.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
elseif redis.call('ZCARD', KEYS[3]) == 0 then redis.call('ZREM', KEYS[2], ARGV[3])
else redis.call('ZADD', KEYS[2], 0, ARGV[3]) end
if ARGV[4] == 'paused' then redis.call('ZREM', KEYS[4], ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1
