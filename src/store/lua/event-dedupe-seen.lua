-- Whether each id was marked in the buckets of the window: 1 (seen) or 0 per id, in call order.
-- ARGV: current bucket, buckets back, then the partitions.
-- KEYS[1] is the meta hash of the call's first partition, which routes the call on a cluster, where
-- a call holds one partition (each is its own slot). Per partition, ARGV carries its hash tag, the
-- number of ids, then each id's set hash and member; its meta hash and set keys are built from the
-- tag, so on a cluster they all hash to KEYS[1]'s slot (on one server, where a call may hold every
-- partition, any key may be touched). The layout of a bucket's sets: see event-dedupe.ts.

local bucket, back = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, a = {}, 3
while a <= #ARGV do
  local prefix, count = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local layout = {}
  for b = bucket - back, bucket do
    local meta = redis.call('HMGET', prefix .. ':meta', 's' .. b, 'g' .. b)
    if meta[1] then layout[#layout + 1] = {b, tonumber(meta[1]), tonumber(meta[2] or '0')} end
  end
  for _ = 1, count do
    local setHash, member = tonumber(ARGV[a]), ARGV[a + 1]
    a = a + 2
    local found = 0
    for _, l in ipairs(layout) do
      local sets = l[2]
      for g = 0, l[3] do
        if redis.call('SISMEMBER', prefix .. ':' .. l[1] .. ':' .. g .. ':' .. (setHash % sets), member) == 1 then
          found = 1
          break
        end
        sets = sets * 2
      end
      if found == 1 then break end
    end
    out[#out + 1] = found
  end
end
return out
