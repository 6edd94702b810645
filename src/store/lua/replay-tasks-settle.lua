-- Counts each replay's outcome once, however many readers race: only the reader whose SREM took the
-- id out of the open set counts it. KEYS: the task's open set, its state hash (one hash tag);
-- ARGV: id, field, id, field, … (the field each id's outcome adds to). Returns 1.

for i = 1, #ARGV, 2 do
  if redis.call('SREM', KEYS[1], ARGV[i]) == 1 then redis.call('HINCRBY', KEYS[2], ARGV[i + 1], 1) end
end
return 1
