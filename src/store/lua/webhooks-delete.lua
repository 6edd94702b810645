-- Deletes a vendor's webhook: its record, its index field (while it still names this webhook), and
-- its place in the vendor's set, the FIFO set and the ordering keys. KEYS: the records by id, the
-- index by vendor and event type, the vendor's set, the FIFO set, the ordering keys. ARGV: the
-- webhook id, the vendor id (another vendor's webhook is left alone). Returns 1 when deleted, else 0.

local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local record = cjson.decode(current)
if record.vendorId ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local field = record.vendorId .. '\n' .. record.eventType
if redis.call('HGET', KEYS[2], field) == ARGV[1] then redis.call('HDEL', KEYS[2], field) end
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
