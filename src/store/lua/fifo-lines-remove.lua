-- Removes deliveries ARGV[3…] from a line (an erasure; KEYS: the ready set, the heads index, the
-- line's sequence, sorted set and jobs; ARGV[1] the time, ARGV[2] the line id), whoever drives it.
-- A line left empty goes whole (sequence, ready entry, heads entry), as when its last delivery is
-- delivered; a line whose head went has its next head due now, waiting from now (not at the time
-- the removed head was to be retried). A driver that was on a removed head finds it gone when it
-- tries to remove it and leaves the line to its lease's end. Replies how many were removed.

local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
local removed = 0
for i = 3, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[4], ARGV[i])
  redis.call('HDEL', KEYS[5], ARGV[i])
end
local after = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if not after then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[2])
elseif after ~= head then
  redis.call('ZADD', KEYS[1], 'XX', 'LT', ARGV[1], ARGV[2])
  redis.call('ZADD', KEYS[2], 'XX', ARGV[1], ARGV[2])
end
return removed
