-- Compare-and-set: the caller computed ARGV[3] from ARGV[2]; if the record moved meanwhile, it retries.
-- KEYS: the records by id, the index by vendor and event type, the FIFO set, the ordering keys.
-- ARGV: the webhook id, the record it read, the new record, the old and new index fields, the new
-- ordering ('fifo' or 'none'), the new ordering key ('' for none). Returns 'ok', 'not_found',
-- 'changed' (the record moved) or 'conflict' (another webhook holds the new index field).

local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 'not_found' end
if current ~= ARGV[2] then return 'changed' end
if ARGV[4] ~= ARGV[5] then
  local holder = redis.call('HGET', KEYS[2], ARGV[5])
  if holder and holder ~= ARGV[1] then return 'conflict' end
  if redis.call('HGET', KEYS[2], ARGV[4]) == ARGV[1] then redis.call('HDEL', KEYS[2], ARGV[4]) end
  redis.call('HSET', KEYS[2], ARGV[5], ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[6] == 'fifo' then redis.call('SADD', KEYS[3], ARGV[1]) else redis.call('SREM', KEYS[3], ARGV[1]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[4], ARGV[1], ARGV[7]) else redis.call('HDEL', KEYS[4], ARGV[1]) end
return 'ok'
