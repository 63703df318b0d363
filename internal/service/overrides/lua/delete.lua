-- Removes one override. KEYS[1] is the hash of overrides, KEYS[2] its
-- version counter; ARGV[1] is the field (limit:key). Returns the removed
-- value, or false.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('INCR', KEYS[2])
end
return old
