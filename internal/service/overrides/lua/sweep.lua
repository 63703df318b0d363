-- Removes expired overrides that nobody changed since they were read.
-- KEYS[1] is the hash of overrides, KEYS[2] its version counter; ARGV holds
-- pairs of a field and the value it had. Returns how many were removed.
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
if n > 0 then
  redis.call('INCR', KEYS[2])
end
return n
