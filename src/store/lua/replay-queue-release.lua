-- KEYS: vendors, leases, tokens, owners, tries, jobs. ARGV: waiting prefix, running prefix, task id,
-- token, 'done' or 'yield' (the vendor then goes to the end of the turn order). Replies 1, or 0
-- when the token no longer holds the lease.

local vendors, leases, tokens, owners, tries, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local waitingPrefix, runningPrefix, id, token, how = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HGET', tokens, id) ~= token then return 0 end
local vendor = redis.call('HGET', owners, id)
redis.call('ZREM', leases, id)
redis.call('HDEL', tokens, id)
redis.call('ZREM', runningPrefix .. vendor, id)
if how == 'done' then
  redis.call('HDEL', tries, id)
  redis.call('HDEL', owners, id)
  redis.call('HDEL', jobs, id)
else
  redis.call('LREM', vendors, 1, vendor)
  redis.call('RPUSH', vendors, vendor)
  redis.call('LPUSH', waitingPrefix .. vendor, id)
end
return 1
