-- held.lua: the held scan's look at one concurrency key (see held.go): it
-- drops the key's expired holds, as any script that reads the key does,
-- and reports what it holds.
--
-- KEYS[1]: a concurrency key.
-- ARGV[1]: now (see lib.lua).
-- Reply: the units held at now, the number of holds (leases) that hold
--   them, and the number of expired holds dropped.

local held, leases, dropped = conc_sweep(KEYS[1], NOW)
return {held, leases, dropped}
