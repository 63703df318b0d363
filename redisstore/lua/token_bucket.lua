-- token_bucket.lua: a bucket of capacity B, full at first, refilled at L/P.
--
-- Mirrors internal/algo/tokenbucket.go: the bucket is stored as GCRA stores
-- it, as the instant it will be full again (see tat.lua).
local function token_bucket(L, P, B, at, frac, now, cost)
  local ok, nat, nfrac, rem, retry, reset = tat_step(L, P, B, at, frac, now, cost)
  return ok, nat, nfrac, rem, retry, reset, 0
end
