-- Sets one override. KEYS[1] is the hash of overrides, KEYS[2] its version
-- counter; ARGV[1] is the field (limit:key), ARGV[2] the value (JSON),
-- ARGV[3] the most fields the hash may hold, ARGV[4] the time in Unix
-- milliseconds, before which an override's expires_at_ms keeps it.
-- Returns the field's previous value, or false.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  -- Full: drop the expired overrides first.
  local all = redis.call('HGETALL', KEYS[1])
  local now = tonumber(ARGV[4])
  for i = 1, #all, 2 do
    local ok, rec = pcall(cjson.decode, all[i + 1])
    if ok and type(rec) == 'table' and tonumber(rec.expires_at_ms) and tonumber(rec.expires_at_ms) > 0
        and tonumber(rec.expires_at_ms) <= now then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
    return redis.error_reply('sluice: overrides full')
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return old
