-- Removes the heads-index entry ARGV[1] (KEYS[1]) while its score is still ARGV[2] and its line's
-- sorted set (KEYS[2]) does not exist: an entry its line outlived (written by a version that kept
-- the index and then removed by one that did not). Fenced so that an append that started the line
-- again meanwhile keeps its entry. Returns 1 when removed, else 0.

if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
