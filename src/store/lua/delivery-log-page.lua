-- One page of the recent list, newest first, within accepted times [ARGV[5], ARGV[4]], matching a
-- status (ARGV[2]) and event type (ARGV[3]) when given ('' = any), after the cursor id ARGV[6] among
-- entries scored ARGV[4]: one round trip however far the matches lie. ARGV[1] is the webhook's
-- record key prefix, hash tag included, so every key read hashes to the slot of KEYS[1]; KEYS[2] the
-- event log's status hash (compact records). A record without a status is pending (as toSummary
-- reads it); an id with neither record is skipped. ARGV[7]: the page's size. Returns {more (1/0),
-- score of the last id found, ids...}.
--@include delivery-row.lua

local limit = tonumber(ARGV[7])
local entries = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[4], ARGV[5], 'WITHSCORES')
local found = {}
local lastScore = ''
local i = 1
while i <= #entries do
  local id, score = entries[i], entries[i + 1]
  i = i + 2
  if not (ARGV[6] ~= '' and tonumber(score) == tonumber(ARGV[4]) and id >= ARGV[6]) then
    local f = rowOf(ARGV[1], KEYS[2], id)
    if f and (ARGV[2] == '' or (f[2] or 'pending') == ARGV[2]) and (ARGV[3] == '' or f[3] == ARGV[3]) then
      found[#found + 1] = id
      lastScore = score
      if #found >= limit then break end
    end
  end
end
local more = 0
if #found >= limit and i <= #entries then more = 1 end
return {more, lastScore, unpack(found)}
