-- fixed_window.lua: at most L per window [k·P, (k+1)·P) since the Unix epoch.
--
-- Mirrors internal/algo/fixedwindow.go (state and roll in window.lua).

-- fixed_window decides a request: admitted iff count + cost <= L (prev is
-- always 0 and unused). It returns allowed, the new start, prev and curr,
-- the state's expiry, remaining, retry (µs, -1 for never) and reset (µs).
local function fixed_window(L, P, start, prev, curr, now, cost)
  local expire = 0
  if curr > 0 then
    expire = start + P
  end
  local ws, count, _
  now, ws, _, count = window_roll(start, 0, curr, expire, now, P)
  local e = ws + P
  local reset = 0
  if count > 0 then
    reset = e - now
  end
  if cost > L then
    return false, start, 0, curr, expire, L - count, -1, reset
  end
  if count + cost <= L then
    count = count + cost
    reset = 0
    if count > 0 then
      reset = e - now
    end
    return true, ws, 0, count, e, L - count, 0, reset
  end
  return false, start, 0, curr, expire, L - count, e - now, reset
end
