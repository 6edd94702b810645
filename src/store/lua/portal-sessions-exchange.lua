-- Exchanges a link's token once: when the stored token digest matches, it is removed (so a second
-- use fails) and the cookie's digest and CSRF token are stored, in one step, so two tabs racing
-- with the same link cannot both get a cookie. Replies with the session's fields, or nil.
-- KEYS[1] session hash; ARGV token digest, cookie digest, CSRF token, now (ms).

local stored = redis.call('HGET', KEYS[1], 'tokenHash')
if not stored or stored ~= ARGV[1] then return nil end
if tonumber(redis.call('HGET', KEYS[1], 'expiresAtMs')) <= tonumber(ARGV[4]) then return nil end
redis.call('HDEL', KEYS[1], 'tokenHash')
redis.call('HSET', KEYS[1], 'cookieHash', ARGV[2], 'csrf', ARGV[3], 'openedAtMs', ARGV[4])
return redis.call('HGETALL', KEYS[1])
