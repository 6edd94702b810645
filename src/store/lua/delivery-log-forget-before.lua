-- A webhook's own retention: removes finished records accepted before ARGV[2] (from the recent list,
-- KEYS[1]) and dead letters that died before it (KEYS[2]), up to ARGV[3] of each; records still
-- being tried are left (a later attempt would find its record's identity gone). ARGV[1]: the record
-- key prefix. Returns how many records went.

local n = 0
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(old) do
  local status = redis.call('HGET', ARGV[1] .. id, 'status')
  if status ~= 'pending' and status ~= 'retrying' and status ~= 'dead' then
    redis.call('DEL', ARGV[1] .. id)
    redis.call('ZREM', KEYS[1], id)
    n = n + 1
  end
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(dead) do
  redis.call('DEL', ARGV[1] .. id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  n = n + 1
end
return n
