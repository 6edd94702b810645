-- Over the lines of a webhook (KEYS: each line's sorted set, then its jobs): the deliveries waiting
-- in all, and when the oldest head was accepted (false: no head).

local n, oldest = 0, false
for k = 1, #KEYS, 2 do
  local count = redis.call('ZCARD', KEYS[k])
  if count > 0 then
    n = n + count
    local job = redis.call('HGET', KEYS[k + 1], redis.call('ZRANGE', KEYS[k], 0, 0)[1])
    local at = job and cjson.decode(job).acceptedAtMs
    if type(at) == 'number' and (not oldest or at < oldest) then oldest = at end
  end
end
return {n, oldest}
