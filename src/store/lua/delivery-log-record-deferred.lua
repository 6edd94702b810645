-- Deferrals, each atomically: note when the delivery will be tried; create a pending record if it has none.
-- The due time is stored as `<attempt>:<ms>` for the attempt it belongs to, and kept from the first
-- deferral of that attempt (the schedule, not the deferrals, says when it was due); a value left by
-- an earlier attempt's deferral is simply stale, so recording an attempt need not clear it.
-- KEYS[1] routes the call (on a Redis Cluster a call holds deferrals of one slot). ARGV: retentionMs,
-- deadLetterRetentionMs, then per deferral: record key, recent list key, nextAttemptAtMs, dueAtMs,
-- deliveryId, eventId, eventType, webhookId, vendorId, acceptedAtMs, replayOf, ifNoRecord ('1' or ''),
-- parkedIn (the parked batch job holding it, or ''). Returns 1.

local retention, deadRetention = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for a = 3, #ARGV, 13 do
  local record, recent, nextAt, dueAt, deliveryId, acceptedAtMs = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 9]
  -- Kept for the retention after the attempt it waits for (see delivery-log-record-attempts.lua), never less than it had.
  local keepMs = tonumber(retention) + math.max(0, tonumber(nextAt) - nowMs)
  if redis.call('EXISTS', record) == 1 then
    redis.call('PEXPIRE', record, keepMs, 'GT')
    if ARGV[a + 11] ~= '1' then
      local attempt = tostring(tonumber(redis.call('HGET', record, 'attempts') or '0') + 1) .. ':'
      local due = redis.call('HGET', record, 'dueAt')
      if not due or string.sub(due, 1, #attempt) ~= attempt then redis.call('HSET', record, 'dueAt', attempt .. dueAt) end
      redis.call('HSET', record, 'nextAttemptAtMs', nextAt)
    end
    redis.call('HSET', record, 'parkedIn', ARGV[a + 12])
  else
    redis.call('HSET', record, 'deliveryId', deliveryId, 'eventId', ARGV[a + 5], 'eventType', ARGV[a + 6], 'webhookId', ARGV[a + 7],
      'vendorId', ARGV[a + 8], 'acceptedAtMs', acceptedAtMs, 'replayOf', ARGV[a + 10], 'status', 'pending', 'attempts', '0',
      'updatedAtMs', acceptedAtMs, 'nextAttemptAtMs', nextAt, 'dueAt', '1:' .. dueAt, 'parkedIn', ARGV[a + 12])
    redis.call('PEXPIRE', record, keepMs)
    if redis.call('ZADD', recent, acceptedAtMs, deliveryId) == 1 then redis.call('PEXPIRE', recent, deadRetention) end
  end
  if keepMs > tonumber(deadRetention) then redis.call('PEXPIRE', recent, keepMs, 'GT') end
end
return 1
