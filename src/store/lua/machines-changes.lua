-- KEYS: changes, index. ARGV: last seen entry id ('0-0' = none since the reload), max entries, stream
-- maxlen, max machine ids. Returns {'reload'} when entries may have been lost (our last entry was
-- trimmed or the stream deleted), else {'ok', new last id, changed ids, their index records (nil =
-- removed), 1 when more entries may follow (else 0)}. An entry names every machine one batch of
-- changes touched; entries are taken whole until the ids reach the max, and the records are read
-- in chunks (Lua's unpack is bounded), so one catch-up stays bounded however large the batches were.

local last = ARGV[1]
local entries
if last == '0-0' then
  if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {'reload'} end
  entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[2])
else
  if #redis.call('XRANGE', KEYS[1], last, last) == 0 then return {'reload'} end
  entries = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', ARGV[2])
end
if #entries == 0 then return {'ok', last, {}, {}, 0} end
local more = #entries >= tonumber(ARGV[2]) and 1 or 0
local idsMax = tonumber(ARGV[4])
local ids, seen = {}, {}
local taken = 0
for _, entry in ipairs(entries) do
  if taken > 0 and #ids >= idsMax then
    more = 1
    break
  end
  taken = taken + 1
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'id' and not seen[fields[i + 1]] then
      seen[fields[i + 1]] = true
      ids[#ids + 1] = fields[i + 1]
    end
  end
end
local records = {}
for start = 1, #ids, 1000 do
  local chunk = {}
  for i = start, math.min(#ids, start + 999) do chunk[#chunk + 1] = ids[i] end
  local got = redis.call('HMGET', KEYS[2], unpack(chunk))
  for i = 1, #chunk do records[start + i - 1] = got[i] end
end
return {'ok', entries[taken][1], ids, records, more}
