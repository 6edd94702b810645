-- Marks each id in the current bucket. ARGV: current bucket, the TTL of its sets (ms: they all
-- expire at its end plus the window), marks per set aimed at, the meta hash's TTL (ms), buckets
-- back, then the partitions. A bucket's first mark sizes its first generation from the previous
-- bucket's marks (a quarter of room to grow); when a generation holds what its sets are meant to,
-- the next one, with twice the sets, takes the marks that follow. So sets stay near the target
-- however the rate moves, and a lookup checks a few generations per bucket. Returns 1.
-- KEYS[1] is the meta hash of the call's first partition, which routes the call on a cluster, where
-- a call holds one partition (each is its own slot). Per partition, ARGV carries its hash tag, the
-- number of ids, then each id's set hash and member; its meta hash and set keys are built from the
-- tag, so on a cluster they all hash to KEYS[1]'s slot (on one server, where a call may hold every
-- partition, any key may be touched). The layout of a bucket's sets: see event-dedupe.ts.

local bucket, ttl, target, metaTtl, back = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local a = 6
while a <= #ARGV do
  local prefix, count = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local metaKey = prefix .. ':meta'
  local meta = redis.call('HMGET', metaKey, 's' .. bucket, 'g' .. bucket, 'n' .. bucket)
  local first, g, n = tonumber(meta[1]), tonumber(meta[2] or '0'), tonumber(meta[3] or '0')
  if not first then
    local previous = tonumber(redis.call('HGET', metaKey, 'n' .. (bucket - 1)) or '0')
    first = 1
    while first * target < previous * 1.25 do first = first * 2 end
    local gone = bucket - back - 1
    redis.call('HDEL', metaKey, 's' .. gone, 'g' .. gone, 'n' .. gone)
  end
  local sets = first * 2 ^ g
  local room = target * first * (2 ^ (g + 1) - 1)
  local expiring = {}
  for _ = 1, count do
    local setHash, member = tonumber(ARGV[a]), ARGV[a + 1]
    a = a + 2
    if n >= room then
      g = g + 1
      sets = sets * 2
      room = room + target * sets
    end
    local key = prefix .. ':' .. bucket .. ':' .. g .. ':' .. (setHash % sets)
    if redis.call('SADD', key, member) == 1 then
      n = n + 1
      if not expiring[key] then
        expiring[key] = true
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
  redis.call('HSET', metaKey, 's' .. bucket, first, 'g' .. bucket, g, 'n' .. bucket, n)
  redis.call('PEXPIRE', metaKey, metaTtl)
end
return 1
