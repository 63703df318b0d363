-- leaky_bucket.lua: a queue drained at one cost unit every T = P/L.
--
-- Mirrors internal/algo/leakybucket.go: admission as the token bucket's, and
-- an admitted request waits delay = the backlog before it. maxdelay, when
-- not negative, is the caller's MaxDelay in whole microseconds (rounded
-- down): a request whose delay exceeds it is refused, leaving the state
-- unchanged, with the delay it would have had and a retry that says when the
-- queue will be short enough. A request refused for want of room has delay
-- 0, and the later of the two retries.
local function leaky_bucket(L, P, B, at, frac, now, cost, maxdelay)
  local ok, nat, nfrac, rem, retry, reset, wait = tat_step(L, P, B, at, frac, now, cost)
  if maxdelay >= 0 and wait > maxdelay and retry ~= -1 then
    local short = wait - maxdelay
    if not ok then
      if short > retry then
        retry = short
      end
      return false, at, frac, rem, retry, reset, 0
    end
    local _, _, _, prem, _, preset = tat_step(L, P, B, at, frac, now, 0)
    return false, at, frac, prem, short, preset, wait
  end
  if not ok then
    wait = 0
  end
  return ok, nat, nfrac, rem, retry, reset, wait
end
