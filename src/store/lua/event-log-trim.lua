-- Maintenance: trims one log to a retention (ARGV[1] ms) by up to ARGV[2] entries. KEYS: the log,
-- its bodies, its statuses. When the retention is the webhook's own, shorter than the
-- installation's (ARGV[3] ms), an entry whose first attempt has not been made yet (no status in the
-- log and no delivery record under the prefix ARGV[4]) is kept, as a first attempt may still read
-- its body here (see first-attempts.ts), until the installation's retention takes it. Reads at most
-- four times ARGV[2] entries. Returns how many went.
--@include trim-log.lua

local retention, max, installation, records = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = nowMs()
if retention >= installation then return trimLog(KEYS[1], KEYS[2], KEYS[3], now - retention, max) end
local log, bodies, statuses = KEYS[1], KEYS[2], KEYS[3]
local cutoff, hardCutoff = string.format('%.0f', now - retention - 1), now - installation
local start, removed, read = '-', 0, 0
while removed < max and read < 4 * max do
  local old = redis.call('XRANGE', log, start, cutoff, 'COUNT', max)
  if #old == 0 then break end
  read = read + #old
  local ids, refs = {}, {}
  for _, entry in ipairs(old) do
    local ref = entry[2][2]
    local atMs = tonumber(string.match(entry[1], '^%d+'))
    if atMs <= hardCutoff or redis.call('HEXISTS', statuses, ref) == 1 or redis.call('EXISTS', records .. ref) == 1 then
      if removed + #ids < max then
        ids[#ids + 1] = entry[1]
        refs[#refs + 1] = ref
      end
    end
  end
  if #ids > 0 then
    redis.call('HDEL', bodies, unpack(refs))
    redis.call('HDEL', statuses, unpack(refs))
    redis.call('XDEL', log, unpack(ids))
    removed = removed + #ids
  end
  if #old < max then break end
  start = '(' .. old[#old][1]
end
return removed
