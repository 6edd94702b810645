-- Deliveries just queued by hand, each given a pending record and a place in its webhook's recent
-- list unless it has a record. KEYS[1] routes the call (on a Redis Cluster a call holds deliveries of
-- one slot). ARGV: retentionMs, deadLetterRetentionMs, then per delivery: record key, recent list key,
-- deliveryId, eventId, eventType, webhookId, vendorId, acceptedAtMs, replayOf. Returns 1.

local retention, deadRetention = ARGV[1], ARGV[2]
for a = 3, #ARGV, 9 do
  local record, recent, deliveryId, acceptedAtMs = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 7]
  if redis.call('EXISTS', record) == 0 then
    redis.call('HSET', record, 'deliveryId', deliveryId, 'eventId', ARGV[a + 3], 'eventType', ARGV[a + 4], 'webhookId', ARGV[a + 5],
      'vendorId', ARGV[a + 6], 'acceptedAtMs', acceptedAtMs, 'replayOf', ARGV[a + 8], 'status', 'pending', 'attempts', '0',
      'updatedAtMs', acceptedAtMs)
    redis.call('PEXPIRE', record, retention)
    if redis.call('ZADD', recent, acceptedAtMs, deliveryId) == 1 then redis.call('PEXPIRE', recent, deadRetention) end
  end
end
return 1
