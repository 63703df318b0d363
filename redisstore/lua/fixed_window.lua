-- fixed_window.lua: at most L per window [k·P, (k+1)·P) since the Unix
-- epoch, or per calendar window.
--
-- Mirrors internal/algo/fixedwindow.go (state and roll in window.lua).

-- fixed_window decides a request: admitted iff count + cost <= L (prev is
-- always 0 and unused). It returns allowed, the new start, prev and curr,
-- the state's expiry, remaining, retry (µs, -1 for never) and reset (µs).
local function fixed_window(L, P, start, prev, curr, now, cost)
  local pws, ws, e, count, _
  now, pws, ws, e, _, _, count = window_roll(start, 0, curr, now, P)
  -- The stored state expires at the end of its window.
  local expire = 0
  if count > 0 then
    expire = e
  end
  local reset = 0
  if count > 0 then
    reset = e - now
  end
  -- A debit may leave count above L (see usage.lua): nothing remains.
  local rem = L - count
  if rem < 0 then
    rem = 0
  end
  if cost > L then
    return false, start, 0, curr, expire, rem, -1, reset
  end
  if count + cost <= L then
    count = count + cost
    reset = 0
    if count > 0 then
      reset = e - now
    end
    return true, ws, 0, count, e, L - count, 0, reset
  end
  return false, start, 0, curr, expire, rem, e - now, reset
end
