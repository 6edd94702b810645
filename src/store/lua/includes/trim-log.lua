-- Shared by the scripts: removes up to `max` entries of a log older than `cutoff` (ms), with their
-- bodies and statuses. XDEL of the oldest entries empties the stream's oldest nodes first, which
-- Redis then frees, so the memory is given back as the log is trimmed.

local function trimLog(log, bodies, statuses, cutoff, max)
  local old = redis.call('XRANGE', log, '-', string.format('%.0f', cutoff - 1), 'COUNT', max)
  if #old == 0 then return 0 end
  local ids, refs = {}, {}
  for i, entry in ipairs(old) do
    ids[i] = entry[1]
    refs[i] = entry[2][2]
  end
  redis.call('HDEL', bodies, unpack(refs))
  redis.call('HDEL', statuses, unpack(refs))
  redis.call('XDEL', log, unpack(ids))
  return #old
end
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
