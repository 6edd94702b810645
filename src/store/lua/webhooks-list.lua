-- A vendor's webhooks in one round trip. KEYS: the records by id, the vendor's set. Returns each
-- record (JSON; false for an id whose record is gone).

local ids = redis.call('SMEMBERS', KEYS[2])
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(ids))
