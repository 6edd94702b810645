-- KEYS: docs, index, versions, tombstones, changes. ARGV: stream maxlen, tombstone horizon (ms; older
-- tombstones are dropped, a bounded batch per call), prune batch, then the changes in order:
-- `u`, id, version, Machine JSON, index JSON for an upsert; `r`, id, version for a removal. Returns
-- 'applied', 'stale' or 'missing' per change. The machines it changed go to the change stream as
-- one entry (an `id` field per machine), which listing processes read to update their index.
--
-- Why it works on the batch rather than per change: this slot is one master's, and every machine
-- event of every producer lands on it. The script 1. reads what it needs once (the versions, and
-- whether each removed machine exists), 2. decides every change in order against that state as the
-- earlier changes of the batch left it, exactly as applying them one at a time would, 3. drops a
-- batch of expired tombstones, and 4. writes each machine's final state with one command per key
-- and kind of write. So a call costs at most 13 commands inside the script however many changes it
-- holds, not about five per change.
-- Every list it unpacks has at most two entries per change (CHANGES_PER_CALL_MAX keeps that far
-- below Lua's unpack limit of 8,000) or the prune batch.

local ops, ids, versions, docs, records = {}, {}, {}, {}, {}
local batchIds, removedIds, listed = {}, {}, {}
local n, a = 0, 4
while a <= #ARGV do
  n = n + 1
  local op, id = ARGV[a], ARGV[a + 1]
  ops[n], ids[n], versions[n] = op, id, ARGV[a + 2]
  if not listed[id] then
    listed[id] = true
    batchIds[#batchIds + 1] = id
  end
  if op == 'u' then
    docs[n], records[n] = ARGV[a + 3], ARGV[a + 4]
    a = a + 5
  else
    removedIds[#removedIds + 1] = id
    a = a + 3
  end
end

-- 1. The stored versions; whether each machine a removal names exists (its index record is the smaller field).
local version, exists = {}, {}
local stored = redis.call('HMGET', KEYS[3], unpack(batchIds))
for i, id in ipairs(batchIds) do
  if stored[i] then version[id] = tonumber(stored[i]) end
end
if #removedIds > 0 then
  local present = redis.call('HMGET', KEYS[2], unpack(removedIds))
  for i, id in ipairs(removedIds) do exists[id] = present[i] ~= false end
end

-- 2. Each change in order; the last one applied to a machine decides its final state.
local out, final, changed, named = {}, {}, {}, {}
local removing = false
for i = 1, n do
  local id, v = ids[i], tonumber(versions[i])
  if version[id] and version[id] > v then
    out[i] = 'stale'
  else
    version[id] = v
    final[id] = i
    local was = exists[id]
    exists[id] = ops[i] == 'u'
    if ops[i] == 'r' then removing = true end
    if ops[i] == 'r' and not was then
      out[i] = 'missing'
    else
      out[i] = 'applied'
      if not named[id] then
        named[id] = true
        changed[#changed + 1] = id
      end
    end
  end
end

-- 3. Removals add tombstones, so they also drop a bounded batch of expired ones. Before the
-- writes below, which put back any of these machines the batch itself changed.
if removing then
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
  if #expired > 0 then
    redis.call('HDEL', KEYS[3], unpack(expired))
    redis.call('ZREM', KEYS[4], unpack(expired))
  end
end

-- 4. Each changed machine's final state, one command per key and kind of write.
local docPairs, recordPairs, upserted, removed, tombstones, versionPairs = {}, {}, {}, {}, {}, {}
for _, id in ipairs(batchIds) do
  local i = final[id]
  if i then
    versionPairs[#versionPairs + 1] = id
    versionPairs[#versionPairs + 1] = versions[i]
    if ops[i] == 'u' then
      docPairs[#docPairs + 1] = id
      docPairs[#docPairs + 1] = docs[i]
      recordPairs[#recordPairs + 1] = id
      recordPairs[#recordPairs + 1] = records[i]
      upserted[#upserted + 1] = id
    else
      removed[#removed + 1] = id
      tombstones[#tombstones + 1] = versions[i]
      tombstones[#tombstones + 1] = id
    end
  end
end
if #upserted > 0 then
  redis.call('HSET', KEYS[1], unpack(docPairs))
  redis.call('HSET', KEYS[2], unpack(recordPairs))
  redis.call('ZREM', KEYS[4], unpack(upserted))
end
if #removed > 0 then
  redis.call('HDEL', KEYS[1], unpack(removed))
  redis.call('HDEL', KEYS[2], unpack(removed))
  redis.call('ZADD', KEYS[4], unpack(tombstones))
end
if #versionPairs > 0 then redis.call('HSET', KEYS[3], unpack(versionPairs)) end
if #changed > 0 then
  local fields = {}
  for _, id in ipairs(changed) do
    fields[#fields + 1] = 'id'
    fields[#fields + 1] = id
  end
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
end
return out
