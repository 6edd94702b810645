-- KEYS: vendors, owners, tries, jobs. ARGV: waiting prefix, task id. Replies 1 when the replay was
-- waiting (and is gone), else 0.

local vendors, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local waitingPrefix, id = ARGV[1], ARGV[2]
local vendor = redis.call('HGET', owners, id)
if not vendor then return 0 end
local line = waitingPrefix .. vendor
if redis.call('LREM', line, 1, id) == 0 then return 0 end
redis.call('HDEL', owners, id)
redis.call('HDEL', tries, id)
redis.call('HDEL', jobs, id)
if redis.call('LLEN', line) == 0 then redis.call('LREM', vendors, 0, vendor) end
return 1
