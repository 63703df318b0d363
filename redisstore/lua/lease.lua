-- lease.lua: Release or Renew of one lease on its concurrency keys, all at
-- one time, atomically. The Go side sends the keys of one hash slot per
-- call (on Redis Cluster, a lease whose keys lie in several slots takes one
-- call per slot: each key's holds are independent of the others').
--
-- KEYS: the lease's concurrency keys.
-- ARGV: now (see lib.lua), the operation ('r' Release, 'n' Renew) and the
--   lease id.
-- Reply: for Release, the units freed (the lease's holds that still
--   counted); for Renew, 1 and the time in µs until the first renewed hold
--   expires, or 0 and 0 when no hold of the lease counted any more. Then,
--   for each key, the number of expired holds (of any lease) dropped
--   there.

local op, id = ARGV[2], ARGV[3]
local dropped = {}
if op == 'r' then
  local freed = 0
  for i = 1, #KEYS do
    local f, d = conc_release(KEYS[i], id, NOW)
    freed, dropped[i] = freed + f, d
  end
  return {freed, unpack(dropped)}
end
local first = -1
for i = 1, #KEYS do
  local left, d = conc_renew(KEYS[i], id, NOW)
  dropped[i] = d
  if left >= 0 and (first < 0 or left < first) then
    first = left
  end
end
if first < 0 then
  return {0, 0, unpack(dropped)}
end
return {1, first, unpack(dropped)}
