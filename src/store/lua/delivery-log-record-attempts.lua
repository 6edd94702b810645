-- Attempts of many deliveries, each atomically (one script for the lot). KEYS[1] is the recent list of
-- the call's first webhook: it routes the call on a Redis Cluster, where a call holds the attempts of
-- webhooks in one slot (a webhook's keys share its hash tag). ARGV: the fixed arguments (retention,
-- dead-letter retention, recent list length, trim bound, tombstone grace; all ms or counts), the
-- number of webhooks, each webhook's recent list, dead-letter set, failing-since key, record key
-- prefix, event-log bodies and statuses, then 17 arguments per attempt (its webhook's number, then
-- as `flush` lists them). Returns, per attempt, when its webhook's current run of failures began
-- (ms, as text), or nil once delivered.
--@include trim-recent.lua

local retention, deadRetention, recentMax, trimMax, grace = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local webhooks, a = {}, 7
for i = 1, tonumber(ARGV[6]) do
  webhooks[i] = {recent = ARGV[a], dead = ARGV[a + 1], failing = ARGV[a + 2], records = ARGV[a + 3],
    logBodies = ARGV[a + 4], logStatuses = ARGV[a + 5]}
  a = a + 6
end
local out = {}
while a <= #ARGV do
  local w = webhooks[tonumber(ARGV[a])]
  local status, n, outcome, code, atMs, nextAt, attemptJson, deliveryId, acceptedAtMs, body =
    ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
  local eventId, eventType, webhookId, vendorId, replayOf = ARGV[a + 11], ARGV[a + 12], ARGV[a + 13], ARGV[a + 14], ARGV[a + 15]
  local logged = ARGV[a + 16]
  a = a + 17
  local record = w.records .. deliveryId
  local dead = status == 'dead'
  -- Attempts live in the record itself, one field each: one key per delivery, not two.
  local fields = {'status', status, 'attempts', n, 'lastOutcome', outcome, 'lastStatusCode', code,
    'updatedAtMs', atMs, 'nextAttemptAtMs', nextAt, 'attempt:' .. n, attemptJson}
  if n == '1' then
    local i = #fields
    fields[i + 1], fields[i + 2] = 'deliveryId', deliveryId
    fields[i + 3], fields[i + 4] = 'eventId', eventId
    fields[i + 5], fields[i + 6] = 'eventType', eventType
    fields[i + 7], fields[i + 8] = 'webhookId', webhookId
    fields[i + 9], fields[i + 10] = 'vendorId', vendorId
    fields[i + 11], fields[i + 12] = 'acceptedAtMs', acceptedAtMs
    fields[i + 13], fields[i + 14] = 'replayOf', replayOf
  end
  -- The body is kept only where a replay may need it: with the dead letter.
  if dead then
    local i = #fields
    fields[i + 1], fields[i + 2] = 'body', body
  end
  redis.call('HSET', record, unpack(fields))
  -- A delivery still being tried keeps its record for the retention after its next attempt: a
  -- retention shorter than a gap of the schedule must not take the attempts made (the next would
  -- then start the schedule over). Its webhook's recent list lives as long.
  local retryUntil = status == 'retrying' and nextAt ~= '' and tonumber(retention) + math.max(0, tonumber(nextAt) - tonumber(atMs))
  redis.call('PEXPIRE', record, retryUntil or (dead and deadRetention or retention))

  -- The recent list holds dead letters' ids too, so it lives as long as they do after its last addition.
  if redis.call('ZADD', w.recent, acceptedAtMs, deliveryId) == 1 then redis.call('PEXPIRE', w.recent, deadRetention) end
  if retryUntil and retryUntil > tonumber(deadRetention) then redis.call('PEXPIRE', w.recent, retryUntil, 'GT') end
  -- Trimmed after this record's write, so its new status counts should it be among the oldest.
  trimRecent(w.recent, w.records, recentMax, trimMax, grace)

  -- A final status is noted in the event log (see event-log.ts) for the event it delivers (a
  -- replay's, for the event it replays), while the log still holds that event.
  if logged ~= '' and redis.call('HEXISTS', w.logBodies, logged) == 1 then
    redis.call('HSET', w.logStatuses, logged, status)
    redis.call('PEXPIRE', w.logStatuses, deadRetention)
  end

  if dead then
    redis.call('ZADD', w.dead, atMs, deliveryId)
    -- Millisecond times have 13 digits: exact through Lua's number-to-string conversion (%.14g).
    redis.call('ZREMRANGEBYSCORE', w.dead, '-inf', tonumber(atMs) - tonumber(deadRetention))
    redis.call('PEXPIRE', w.dead, deadRetention)
  end

  local since = false
  if status == 'delivered' then
    redis.call('DEL', w.failing)
  -- A disabled webhook's dead letter, or a paused one's past its hold, was never sent: it says
  -- nothing about the endpoint, so it neither starts nor continues the run of failures.
  elseif outcome ~= 'webhook_disabled' and outcome ~= 'paused_expired' then
    since = redis.call('GET', w.failing)
    -- Nor was an attempt held by an open circuit: it continues a run of failures, but cannot start one.
    if not since and outcome ~= 'circuit_open' then
      redis.call('SET', w.failing, atMs)
      since = atMs
    end
  end
  out[#out + 1] = since
end
return out
