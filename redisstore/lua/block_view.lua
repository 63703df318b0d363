-- block_view.lua: the block of one (policy, key), for Inspect.
--
-- KEYS[1]: the block key (see block.lua). ARGV[1]: the time (see lib.lua).
-- Reply: the time, then u, f and n (0, 0, 0 for none).

local u, f, n = block_load(KEYS[1])
return {NOW, u, f, n}
