-- KEYS: vendors, owners, jobs. ARGV: waiting prefix, running prefix, vendor, heldMax, then per replay
-- its task id and job. Replies -1 when admitted, else what the vendor holds (nothing is admitted).
--@include replay-queue-steps.lua

local vendors, owners, jobs = KEYS[1], KEYS[2], KEYS[3]
local waitingPrefix, runningPrefix, vendor, heldMax = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local line = waitingPrefix .. vendor
local held = redis.call('LLEN', line) + redis.call('ZCARD', runningPrefix .. vendor)
if held + (#ARGV - 4) / 2 > heldMax then return held end
for i = 5, #ARGV, 2 do
  redis.call('HSET', owners, ARGV[i], vendor)
  redis.call('HSET', jobs, ARGV[i], ARGV[i + 1])
  wait(vendors, line, vendor, ARGV[i], 'end')
end
return -1
