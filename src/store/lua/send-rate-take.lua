-- takeSendToken of src/domain/rate-limit.ts, step for step, on the window of one webhook (KEYS[1],
-- a hash: a field per 50 ms slot with its sends, named by the slot's number, and `defer`; in µs).
-- The clock is Redis's own (TIME), one clock for every worker however theirs differ; ARGV[3]
-- replaces it in the conformance test. Numbers stay below 2^53 µs and are written with %.0f: Lua's
-- tostring would round them to 14 digits. Replies 0 when sent, else the wait in µs (always > 0).
-- The hash expires once its slots have left the window and the line of refusals ended.
-- ARGV: the rate (sends a second), a random number in [0, 1) that spreads refusals past the
-- horizon, now (µs, '' for Redis's clock), then rate-limit.ts's constants: SLOT_US, WINDOW_SLOTS,
-- DEFER_HORIZON_US (passed, so that the pure function and this script share one definition).

local rate = tonumber(ARGV[1])
local slotUs, windowSlots, horizonUs = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now
if ARGV[3] ~= '' then now = tonumber(ARGV[3]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local slot = math.floor(now / slotUs)
local oldest = slot - windowSlots
local fields = redis.call('HGETALL', KEYS[1])
local counts = {}
local total = 0
local defer = 0
local stale = {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if name == 'defer' then defer = tonumber(fields[i + 1]) else
    local at = tonumber(name)
    if at < oldest then stale[#stale + 1] = name else
      local count = tonumber(fields[i + 1])
      counts[at] = count
      total = total + count
    end
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
local reply = 0
if total < rate then
  redis.call('HINCRBY', KEYS[1], string.format('%.0f', slot), 1)
else
  local freeAt = (slot + 1) * slotUs
  local left = total
  for at = oldest, slot do
    left = left - (counts[at] or 0)
    if left < rate then
      freeAt = (at + windowSlots + 1) * slotUs
      break
    end
  end
  local horizon = now + horizonUs
  local inLine = math.max(freeAt, defer)
  if inLine < horizon then
    reply = inLine - now
    defer = inLine + math.ceil((windowSlots + 1) * slotUs / rate)
  else
    reply = math.max(freeAt - now, math.floor(horizonUs / 2 + tonumber(ARGV[2]) * horizonUs / 2))
    defer = horizon
  end
  redis.call('HSET', KEYS[1], 'defer', string.format('%.0f', defer))
end
redis.call('PEXPIRE', KEYS[1], math.ceil((math.max((slot + windowSlots + 1) * slotUs, defer) - now) / 1000) + 1000)
return reply
