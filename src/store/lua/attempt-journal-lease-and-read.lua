-- Takes (or renews) the shard's lease for ARGV[1] (ARGV[2] ms) and, when held, reads up to ARGV[3]
-- of its oldest entries. KEYS[1]: the journal, KEYS[2]: its lease (one hash tag). Returns the
-- entries, or false when another process holds the shard.

local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return false end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[3])
