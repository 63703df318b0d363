-- fixed_window.lua: at most L per window [k·P, (k+1)·P) since the Unix epoch.
--
-- Mirrors internal/algo/fixedwindow.go. The window algorithms keep start
-- (the start of the window that curr counts), prev (the count of the window
-- before it, sliding window only), curr, and w when times are tracked. A
-- key holds "start curr" when prev and w are 0, else "start prev curr w". A
-- stored state always has curr > 0, so it expires span after start: span is
-- P for the fixed window and 2·P for the sliding window.

-- window_roll clamps now so that it is never before the stored window and
-- returns it with the start of the window holding it and the counts of that
-- window and the one before it.
local function window_roll(start, prev, curr, expire, now, P)
  if now < start then
    now = start
  end
  local _, off = divmod(now, P)
  local ws = now - off
  if expire <= now then
    return now, ws, 0, 0
  elseif start == ws then
    return now, ws, prev, curr
  elseif start == ws - P then
    return now, ws, curr, 0
  end
  return now, ws, 0, 0
end

-- fixed_window decides a request: admitted iff count + cost <= L. It returns
-- allowed, the new start, prev and curr, the state's expiry, remaining,
-- retry (µs, -1 for never) and reset (µs).
local function fixed_window(L, P, start, curr, now, cost)
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
