-- The journal's projection (see attempt-journal.ts): first attempts delivered without a record,
-- per webhook, written as compact records into the event log's status hash and listed in the recent
-- list; the failure run ends if it began before the latest of them. Idempotent: an entry projected
-- again writes the same. An attempt whose event is no longer in the log (erased meanwhile, or past
-- its retention) is not written, so nothing of an erased event comes back. KEYS[1] routes the call
-- (one slot). ARGV: dead-letter retention, recent list length, trim bound, tombstone grace, then per
-- webhook: recent list, status hash, log bodies, failing-since key, record key prefix, the number of
-- its attempts, then per attempt: delivery id, accepted ms, at ms, compact record. Returns how many
-- attempts it wrote.
--@include trim-recent.lua

local deadRetention, recentMax, trimMax, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local a, written = 5, 0
while a <= #ARGV do
  local recent, statuses, bodies, failing, records, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5])
  a = a + 6
  local ids = {}
  for i = 0, n - 1 do ids[i + 1] = ARGV[a + i * 4] end
  local logged = redis.call('HMGET', bodies, unpack(ids))
  local members, fields, lastAt = {}, {}, 0
  for i = 0, n - 1 do
    local b = a + i * 4
    if logged[i + 1] then
      members[#members + 1], members[#members + 2] = ARGV[b + 1], ARGV[b]
      fields[#fields + 1], fields[#fields + 2] = ARGV[b], ARGV[b + 3]
      lastAt = math.max(lastAt, tonumber(ARGV[b + 2]))
    end
  end
  a = a + n * 4
  if #fields > 0 then
    redis.call('HSET', statuses, unpack(fields))
    redis.call('PEXPIRE', statuses, deadRetention)
    if redis.call('ZADD', recent, unpack(members)) > 0 then redis.call('PEXPIRE', recent, deadRetention) end
    trimRecent(recent, records, recentMax, trimMax, grace)
    -- A run of failures that began after these deliveries (a later attempt failed) goes on.
    local since = redis.call('GET', failing)
    if since and tonumber(since) <= lastAt then redis.call('DEL', failing) end
    written = written + #fields / 2
  end
end
return written
