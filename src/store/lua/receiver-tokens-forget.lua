-- Deletes the token only if it is still the one the caller saw: a newer one another worker stored stays.
-- KEYS[1]: the cached token; ARGV[1]: the one the caller saw. Returns 1 when deleted, else 0.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
