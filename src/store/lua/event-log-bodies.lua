-- The bodies of deliveries in their webhooks' logs, for first attempts whose stream entry refers to
-- the log rather than carrying the body (see first-attempts.ts). KEYS[1] routes the call. ARGV: per
-- webhook: its bodies hash, the number of its deliveries, then their delivery ids. Returns the
-- bodies in the order asked, false where the log holds none (erased, or past the retention).

local out, a = {}, 1
while a <= #ARGV do
  local bodies, n = ARGV[a], tonumber(ARGV[a + 1])
  local found = redis.call('HMGET', bodies, unpack(ARGV, a + 2, a + 1 + n))
  for i = 1, n do out[#out + 1] = found[i] end
  a = a + 2 + n
end
return out
