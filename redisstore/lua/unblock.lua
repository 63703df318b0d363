-- unblock.lua: Unblock of one (policy, key): its block lifted, its
-- offences forgotten.
--
-- KEYS[1]: the block key (see block.lua). ARGV[1]: the time (see lib.lua);
-- ARGV[2] and ARGV[3]: the refund channel and the state key, which it
-- publishes there, so that other stores drop their local refusals of the
-- key (refunds.go).
-- Reply: 1 if the key was blocked at the time, else 0.

local u = block_load(KEYS[1])
call('DEL', KEYS[1])
call('PUBLISH', ARGV[2], ARGV[3])
if NOW < u then
  return {1}
end
return {0}
