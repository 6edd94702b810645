-- Shared by the attempt scripts: trims a webhook's recent list to `recentMax` ids (at most `trimMax`
-- a call, so a call's work stays bounded). A finished delivery off the list leaves only its status,
-- for the grace period: long enough for a batch re-run after a crash to see it was delivered. A dead
-- letter stays replayable and a retrying one still has attempts to record: those two expire by
-- their TTL. (A compact record, see compactDelivered, lives in the event log's status hash until
-- its event is trimmed from the log.)

local function trimRecent(recent, records, recentMax, trimMax, grace)
  local over = redis.call('ZCARD', recent) - recentMax
  if over <= 0 then return end
  local fallen = redis.call('ZRANGE', recent, 0, math.min(over, trimMax) - 1)
  redis.call('ZREM', recent, unpack(fallen))
  for _, id in ipairs(fallen) do
    -- These ids are known only here, so their keys cannot come as arguments. Every key built from
    -- the webhook's record key prefix (hash tag included) hashes to the slot of its recent list,
    -- so the script stays within the call's slot.
    local key = records .. id
    local fallenStatus = redis.call('HGET', key, 'status')
    if fallenStatus == 'delivered' or fallenStatus == 'dropped' or fallenStatus == 'replayed' then
      redis.call('DEL', key)
      redis.call('HSET', key, 'status', fallenStatus)
      redis.call('PEXPIRE', key, grace)
    end
  end
end
