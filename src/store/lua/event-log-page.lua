-- A page of a log (KEYS: the log, its bodies, its statuses): entries from ARGV[1] to ARGV[2] (stream ids, inclusive), up to ARGV[3], each with
-- its status (the final one, else the delivery record's, else false) and, when ARGV[4] is 1, its
-- body. ARGV[5]: the prefix of the webhook's delivery record keys. Per entry: id, delivery id, event
-- id, event type, status, body.

local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
local out = {}
for i, entry in ipairs(entries) do
  local f = entry[2]
  local d = f[2]
  -- A compact record (a first attempt delivered without a record of its own, see delivery-log.ts)
  -- starts with its status.
  local status = redis.call('HGET', KEYS[3], d)
  if status then status = string.match(status, '^[^\t\n]*')
  else status = redis.call('HGET', ARGV[5] .. d, 'status') end
  local body = false
  if ARGV[4] == '1' then body = redis.call('HGET', KEYS[2], d) end
  out[i] = {entry[1], d, f[4], f[6], status, body}
end
return out
