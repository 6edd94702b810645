-- Maintenance: trims one log to the retention (ARGV[1] ms) by up to ARGV[2] entries. KEYS: the log,
-- its bodies, its statuses. Returns how many went.
--@include trim-log.lua

return trimLog(KEYS[1], KEYS[2], KEYS[3], nowMs() - tonumber(ARGV[1]), tonumber(ARGV[2]))
