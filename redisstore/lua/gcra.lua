-- gcra.lua: the generic cell rate algorithm.
--
-- Mirrors internal/algo/gcra.go: one timestamp per key, the theoretical
-- arrival time (see tat.lua); its decisions are the token bucket's.
local function gcra(L, P, B, at, frac, now, cost)
  local ok, nat, nfrac, rem, retry, reset = tat_step(L, P, B, at, frac, now, cost)
  return ok, nat, nfrac, rem, retry, reset, 0
end
