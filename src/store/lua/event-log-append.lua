-- Appends events to their webhooks' logs, each once however often ingest runs again for it (the
-- body's HSETNX is the guard); trims what the retention has passed and sets the keys' expiry, so an
-- idle webhook's log goes whole. KEYS[1] routes the call. ARGV: retention (ms), trim bound, then
-- per entry: log, bodies, statuses, delivery id, event id, event type, body. Returns 0.
--@include trim-log.lua

local retention, trimMax = tonumber(ARGV[1]), tonumber(ARGV[2])
local cutoff = nowMs() - retention
local seen = {}
for a = 3, #ARGV, 7 do
  local log, bodies, statuses = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if redis.call('HSETNX', bodies, ARGV[a + 3], ARGV[a + 6]) == 1 then
    redis.call('XADD', log, '*', 'd', ARGV[a + 3], 'e', ARGV[a + 4], 't', ARGV[a + 5])
  end
  if not seen[log] then
    seen[log] = true
    trimLog(log, bodies, statuses, cutoff, trimMax)
    redis.call('PEXPIRE', log, retention)
    redis.call('PEXPIRE', bodies, retention)
  end
end
return 0
