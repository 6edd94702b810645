-- Each (vendor, event type)'s webhook id, whether it is in the FIFO set, and a FIFO webhook's
-- ordering key when it has one: the matcher's one round trip. KEYS: the index by vendor and event
-- type, the FIFO set, the ordering keys. ARGV: the index fields. Returns per field {id, 1 or 0
-- (FIFO), ordering key} ({id, fifo} without a key), or false when no webhook matches.

local ids = redis.call('HMGET', KEYS[1], unpack(ARGV))
local reply = {}
for i, id in ipairs(ids) do
  if id then
    local fifo = redis.call('SISMEMBER', KEYS[2], id)
    local key = fifo == 1 and redis.call('HGET', KEYS[3], id)
    if key then reply[i] = {id, fifo, key} else reply[i] = {id, fifo} end
  else
    reply[i] = false
  end
end
return reply
