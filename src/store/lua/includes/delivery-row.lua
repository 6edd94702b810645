-- Shared by the read scripts: a delivery's row from its record, or from its compact record in the
-- event log's status hash (see compactDelivered) when it has no record or only the pending one a
-- deferral or hand-off left before its first attempt: {deliveryId, status, eventType, attempts,
-- lastOutcome, lastStatusCode, updatedAtMs}, or nil.

local function rowOf(records, statuses, id)
  local f = redis.call('HMGET', records .. id, 'deliveryId', 'status', 'eventType', 'attempts', 'lastOutcome', 'lastStatusCode', 'updatedAtMs')
  if f[1] and ((f[2] or 'pending') ~= 'pending' or (f[4] or '0') ~= '0') then return f end
  local v = redis.call('HGET', statuses, id)
  if v then
    local status, eventType, code, at = string.match(v, '^([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\n')
    if status then return {id, status, eventType, '1', 'delivered', code, at} end
  end
  if f[1] then return f end
  return nil
end
