-- Writes each document only when its stored version is not newer, so a late, older event never
-- overwrites state. KEYS[1] routes the call (on a Redis Cluster a call holds documents of one slot);
-- ARGV: per document its key, version, JSON and TTL (0: kept). Returns 1 (written) or 0 (stale) each.

local out = {}
for a = 1, #ARGV, 4 do
  local key, version = ARGV[a], ARGV[a + 1]
  local stored = redis.call('HGET', key, 'v')
  if stored and tonumber(stored) > tonumber(version) then
    out[#out + 1] = 0
  else
    redis.call('HSET', key, 'v', version, 'doc', ARGV[a + 2])
    if tonumber(ARGV[a + 3]) > 0 then redis.call('PEXPIRE', key, ARGV[a + 3]) else redis.call('PERSIST', key) end
    out[#out + 1] = 1
  end
end
return out
