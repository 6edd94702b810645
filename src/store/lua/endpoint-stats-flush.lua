-- Counts of webhooks' 10-minute slots, each added at once with its hour's roll-up and the newest
-- attempt. KEYS[1] routes the call (on a Redis Cluster a call holds one webhook's slots: its keys
-- share its hash tag). ARGV per entry: slot hash key, quarter-day hash key, last attempt key, the
-- last attempt ('' when none), its TTL (ms), the slot's and the quarter's expiry (Unix ms), the
-- slot's hour within the quarter (0-5), the number of field and increment pairs, then the pairs.
-- Returns 0.

local a = 1
while a <= #ARGV do
  local slot, quarter, lastKey, last, lastTtl, slotAt, quarterAt, hour, pairs =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], tonumber(ARGV[a + 8])
  a = a + 9
  for i = a, a + 2 * pairs - 1, 2 do
    redis.call('HINCRBY', slot, ARGV[i], ARGV[i + 1])
    -- An hour is the sum of its slots: a minute's '<m>d' adds to '<h>d', latency bucket 'b<i>' to '<h>b<i>'.
    local field = ARGV[i]
    if string.sub(field, 1, 1) ~= 'b' then field = string.sub(field, -1) end
    redis.call('HINCRBY', quarter, hour .. field, ARGV[i + 1])
  end
  a = a + 2 * pairs
  redis.call('PEXPIREAT', slot, slotAt)
  redis.call('PEXPIREAT', quarter, quarterAt)
  if last ~= '' then
    -- Workers flush on their own: the newest attempt stays, whichever flush comes last.
    local current = redis.call('GET', lastKey)
    if not current or tonumber(string.match(current, '^%d+')) <= tonumber(string.match(last, '^%d+')) then
      redis.call('SET', lastKey, last, 'PX', lastTtl)
    end
  end
end
return 0
