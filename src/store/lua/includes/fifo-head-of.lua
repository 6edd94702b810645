-- The head's id and job of a line (its sorted set and jobs hash); a head whose job is missing
-- (never written by fifo-lines-append.lua) is dropped. A line found empty has its sequence deleted: it was the
-- line's last key.

local function headOf(line, jobs, seq)
  for _ = 1, 100 do
    local ids = redis.call('ZRANGE', line, 0, 0)
    if #ids == 0 then
      redis.call('DEL', seq)
      return false
    end
    local job = redis.call('HGET', jobs, ids[1])
    if job then return {ids[1], job} end
    redis.call('ZREM', line, ids[1])
  end
  return false
end
