-- Appends deliveries to the lines of one partition, each in the order given, and marks each line
-- ready at ARGV[1] unless it is marked already (a head waiting for its retry keeps its time); a line
-- that was empty has a new head, waiting from ARGV[1]. KEYS[1] is the ready set, KEYS[2] the heads
-- index, then three keys a line: its sequence, its sorted set, its jobs. ARGV after the time, a line
-- after another: its id, how many deliveries follow, then id, job JSON, id, job JSON, ….
-- A delivery already in its line keeps its place (an ingest repeated after a crash appends nothing).
-- Replies how many were new.

local added = 0
local at = 2
for k = 3, #KEYS, 3 do
  local lineId, count = ARGV[at], tonumber(ARGV[at + 1])
  at = at + 2
  if redis.call('EXISTS', KEYS[k + 1]) == 0 then redis.call('ZADD', KEYS[2], ARGV[1], lineId) end
  for _ = 1, count do
    if not redis.call('ZSCORE', KEYS[k + 1], ARGV[at]) then
      local seq = redis.call('INCR', KEYS[k])
      redis.call('ZADD', KEYS[k + 1], seq, ARGV[at])
      redis.call('HSET', KEYS[k + 2], ARGV[at], ARGV[at + 1])
      added = added + 1
    end
    at = at + 2
  end
  redis.call('ZADD', KEYS[1], 'NX', ARGV[1], lineId)
end
return added
