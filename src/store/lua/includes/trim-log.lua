-- Shared by the scripts: removes up to `max` entries of a log older than `cutoff` (ms), with their
-- bodies and statuses. XDEL of the oldest entries empties the stream's oldest nodes first, which
-- Redis then frees, so the memory is given back as the log is trimmed. `kept(ref, id)`, when given,
-- is true for an entry to leave in place: the trim then reads on past it, at most four times `max`
-- entries in all.

local function trimLog(log, bodies, statuses, cutoff, max, kept)
  local start, last, removed, read = '-', string.format('%.0f', cutoff - 1), 0, 0
  while removed < max and read < 4 * max do
    local want = max - removed
    local old = redis.call('XRANGE', log, start, last, 'COUNT', want)
    if #old == 0 then break end
    read = read + #old
    local ids, refs = {}, {}
    for _, entry in ipairs(old) do
      local ref = entry[2][2]
      if not (kept and kept(ref, entry[1])) then
        ids[#ids + 1] = entry[1]
        refs[#refs + 1] = ref
      end
    end
    if #ids > 0 then
      redis.call('HDEL', bodies, unpack(refs))
      redis.call('HDEL', statuses, unpack(refs))
      redis.call('XDEL', log, unpack(ids))
      removed = removed + #ids
    end
    if #old < want or not kept then break end
    start = '(' .. old[#old][1]
  end
  return removed
end
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
