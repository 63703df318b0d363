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
  if type(wait) == 'table' then
    -- In debt (see tat_step): refused, with the later retry as below; the
    -- wait saturates at the longest duration, as Go's delays do.
    if maxdelay >= 0 and retry ~= -1 then
      local wh, wl = wait[1], wait[2]
      if b_lt(MDU_H, MDU_L, wh, wl) then
        wh, wl = MDU_H, MDU_L
      end
      local mh, ml = b_of(maxdelay)
      if b_lt(mh, ml, wh, wl) then
        local sh, sl = t_sub(wh, wl, 0, mh, ml, 0, 1)
        if b_lt(retry[1], retry[2], sh, sl) then
          retry = {sh, sl}
        end
      end
    end
    return false, at, frac, rem, retry, reset, 0
  end
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
