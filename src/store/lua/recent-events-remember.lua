-- Pushes each body onto its webhook's list, keeping the newest RECENT_EVENTS_MAX. KEYS[1] routes the
-- call (on a Redis Cluster a call holds the lists of one slot only). ARGV: how many to keep, the
-- lists' TTL (ms), then key and body pairs. Returns 0.

local keep, ttl = tonumber(ARGV[1]), ARGV[2]
for a = 3, #ARGV, 2 do
  redis.call('LPUSH', ARGV[a], ARGV[a + 1])
  redis.call('LTRIM', ARGV[a], 0, keep - 1)
  redis.call('PEXPIRE', ARGV[a], ttl)
end
return 0
