-- Counts the entries of a log (KEYS: the log, its statuses) from ARGV[1] to ARGV[2] (reading at most ARGV[3]) whose type is among ARGV[5]
-- (a list joined by newlines; empty: any) and whose status is among ARGV[6] (likewise). ARGV[4]: the
-- record key prefix. Returns {count, id of the last entry read or '' when the range ended, entries read}.

local function setOf(text)
  if text == '' then return nil end
  local set = {}
  for item in string.gmatch(text, '[^\n]+') do set[item] = true end
  return set
end
local types, statuses = setOf(ARGV[5]), setOf(ARGV[6])
local max = tonumber(ARGV[3])
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', max)
local count = 0
for _, entry in ipairs(entries) do
  local f = entry[2]
  if types == nil or types[f[6]] then
    if statuses == nil then count = count + 1
    else
      local status = redis.call('HGET', KEYS[2], f[2])
      if status then status = string.match(status, '^[^\t\n]*')
      else status = redis.call('HGET', ARGV[4] .. f[2], 'status') or 'pending' end
      if statuses[status] then count = count + 1 end
    end
  end
end
local last = ''
if #entries == max then last = entries[#entries][1] end
return {count, last, #entries}
