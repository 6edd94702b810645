-- Lets go of the shard's lease (KEYS[1]) if ARGV[1] still holds it. Returns 0.

if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
