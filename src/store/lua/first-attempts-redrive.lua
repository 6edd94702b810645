-- Puts an entry of a first-attempt stream's failed stream (KEYS[1]) back on the stream (KEYS[2]):
-- its fields as they were appended, without what setting it aside added before them (reason,
-- failed_at, entry_id). At most once however many workers ask: the entry must still be in the
-- failed stream. ARGV[1]: the failed entry's id. Returns 1 when it moved, else 0.

local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not found then return 0 end
local fields = found[2]
if fields[1] ~= 'reason' or fields[3] ~= 'failed_at' or fields[5] ~= 'entry_id' or #fields < 8 then return 0 end
redis.call('XADD', KEYS[2], '*', unpack(fields, 7))
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
