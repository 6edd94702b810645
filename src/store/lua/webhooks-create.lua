-- One webhook per (vendor, event type): the index field is claimed atomically with the record, and
-- the FIFO set and the ordering keys (ARGV[5], empty: none) written with it.
-- KEYS: the records by id, the index by vendor and event type, the vendor's set, the FIFO set, the
-- ordering keys. ARGV: the webhook id, its index field, its record (JSON), its ordering ('fifo' or
-- 'none'), its ordering key. Returns false when created, else the id of the webhook that holds the
-- index field.

local holder = redis.call('HGET', KEYS[2], ARGV[2])
if holder then return holder end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
if ARGV[4] == 'fifo' then redis.call('SADD', KEYS[4], ARGV[1]) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[5]) end
return false
