-- Claim (ARGV[4] = 'claim': SET NX) or renew (the token must hold): the lease for ARGV[2] ms, and the
-- ready entry hidden until the lease ends (ARGV[3]), so that others skip the line meanwhile and, if
-- this worker dies, it is due when the lease ends. KEYS: the lease, the ready set. ARGV: token,
-- lease ms, hidden until (ms), 'claim' or 'renew', the line id. Returns 1, or 0 when the lease is
-- another's.

if ARGV[4] == 'claim' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 0 end
else
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[5])
return 1
