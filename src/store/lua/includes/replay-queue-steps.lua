-- Shared by the replay queue's scripts. nowMs: the time in ms, `given` unless it is '', else
-- Redis's clock (TIME), one clock for every worker (a call passes one in the conformance test).
-- wait: puts a replay in its vendor's line, at its head or end, and a vendor whose line was empty
-- at the end of the turn order.

local function nowMs(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function wait(vendors, line, vendor, id, where)
  local length
  if where == 'head' then length = redis.call('LPUSH', line, id) else length = redis.call('RPUSH', line, id) end
  if length == 1 then redis.call('RPUSH', vendors, vendor) end
end
