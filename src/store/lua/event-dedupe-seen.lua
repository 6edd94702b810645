-- Whether each id was marked in the buckets of the window: 1 (seen) or 0 per id, in call order.
-- ARGV: current bucket, buckets back, then the partitions.
-- KEYS[1] is the meta hash of the call's first partition, which routes the call on a cluster, where
-- a call holds one partition (each is its own slot). Per partition, ARGV carries its hash tag, the
-- number of ids, then each id's set hash and member; its meta hash and set keys are built from the
-- tag, so on a cluster they all hash to KEYS[1]'s slot (on one server, where a call may hold every
-- partition, any key may be touched). The layout of a bucket's sets: see event-dedupe.ts.
-- Each set a generation holds is asked once for all the call's ids that fall in it (SMISMEMBER),
-- newest bucket first, and only for the ids no set has answered yet.

local bucket, back = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, a = {}, 3
while a <= #ARGV do
  local prefix, count = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local first = #out
  local setHashes, members, open = {}, {}, {}
  for i = 1, count do
    setHashes[i], members[i] = tonumber(ARGV[a]), ARGV[a + 1]
    open[i] = true
    out[first + i] = 0
    a = a + 2
  end
  local left = count
  for b = bucket, bucket - back, -1 do
    if left == 0 then break end
    local meta = redis.call('HMGET', prefix .. ':meta', 's' .. b, 'g' .. b)
    if meta[1] then
      local sets = tonumber(meta[1])
      for g = 0, tonumber(meta[2] or '0') do
        if left == 0 then break end
        -- The open ids by the set of this generation they would be in.
        local bySet, order = {}, {}
        for i = 1, count do
          if open[i] then
            local key = prefix .. ':' .. b .. ':' .. g .. ':' .. (setHashes[i] % sets)
            local ids = bySet[key]
            if not ids then
              ids = {}
              bySet[key] = ids
              order[#order + 1] = key
            end
            ids[#ids + 1] = i
          end
        end
        for _, key in ipairs(order) do
          local ids = bySet[key]
          local asked = {}
          for n, i in ipairs(ids) do asked[n] = members[i] end
          local found = redis.call('SMISMEMBER', key, unpack(asked))
          for n, i in ipairs(ids) do
            if found[n] == 1 then
              open[i] = nil
              out[first + i] = 1
              left = left - 1
            end
          end
        end
        sets = sets * 2
      end
    end
  end
end
return out
