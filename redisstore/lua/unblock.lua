-- unblock.lua: Unblock of one (policy, key): its block lifted, its
-- offences forgotten.
--
-- KEYS[1]: the block key (see block.lua). ARGV[1]: the time (see lib.lua).
-- Reply: 1 if the key was blocked at the time, else 0.

local u = block_load(KEYS[1])
call('DEL', KEYS[1])
if NOW < u then
  return {1}
end
return {0}
