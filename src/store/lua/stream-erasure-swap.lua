-- Ends a compaction: copies what was appended to KEYS[1] since the copy read it (after ARGV[2]; ''
-- when the copy read nothing), drops from the copy what was trimmed from the stream's head meanwhile,
-- and puts the copy in the stream's place (the stream goes when nothing is left), then frees the
-- lock, all unless the lock (KEYS[3]) is no longer ARGV[1]'s. KEYS[2]: the copy. Replies 1, or 0
-- when the lock was lost.

if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 0 end
local after = ARGV[2]
if after == '' then after = '-' else after = '(' .. after end
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], after, '+')) do
  redis.call('XADD', KEYS[2], entry[1], unpack(entry[2]))
end
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if first == nil or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('XTRIM', KEYS[2], 'MINID', first[1])
  redis.call('RENAME', KEYS[2], KEYS[1])
end
redis.call('DEL', KEYS[3])
return 1
