-- Maintenance: trims one log to a retention (ARGV[1] ms) by up to ARGV[2] entries. KEYS: the log,
-- its bodies, its statuses. When the retention is the webhook's own, shorter than the
-- installation's (ARGV[3] ms), an entry whose first attempt has not been made yet (no status in the
-- log and no delivery record under the prefix ARGV[4]) is kept, as a first attempt may still read
-- its body here (see first-attempts.ts), until the installation's retention takes it. Returns how
-- many went.
--@include trim-log.lua

local retention, max, installation, records = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = nowMs()
local kept = nil
if retention < installation then
  local hardCutoff = now - installation
  kept = function(ref, id)
    return tonumber(string.match(id, '^%d+')) > hardCutoff
      and redis.call('HEXISTS', KEYS[3], ref) == 0
      and redis.call('EXISTS', records .. ref) == 0
  end
end
return trimLog(KEYS[1], KEYS[2], KEYS[3], now - retention, max, kept)
