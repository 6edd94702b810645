-- Appends events to their webhooks' logs, each once however often ingest runs again for it (the
-- body's HSETNX is the guard); trims what the retention has passed and sets the keys' expiry, so an
-- idle webhook's log goes whole. KEYS[1] routes the call. ARGV: retention (ms), trim bound, then per
-- webhook: log, bodies, statuses, the number of its entries, then per entry: delivery id, event id,
-- event type, body. Returns 0.
--@include trim-log.lua

local retention, trimMax = tonumber(ARGV[1]), tonumber(ARGV[2])
local cutoff = nowMs() - retention
local a = 3
while a <= #ARGV do
  local log, bodies, statuses, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  for e = a, a + (n - 1) * 4, 4 do
    if redis.call('HSETNX', bodies, ARGV[e], ARGV[e + 3]) == 1 then
      redis.call('XADD', log, '*', 'd', ARGV[e], 'e', ARGV[e + 1], 't', ARGV[e + 2])
    end
  end
  a = a + n * 4
  trimLog(log, bodies, statuses, cutoff, trimMax)
  redis.call('PEXPIRE', log, retention)
  redis.call('PEXPIRE', bodies, retention)
end
return 0
