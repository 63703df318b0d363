-- window.lua: what the window algorithms (fixed_window, sliding_window)
-- share: rolling the window, and their state in Redis.
--
-- Mirrors internal/algo/fixedwindow.go's Window. The window algorithms keep
-- start (the start of the window that curr counts), prev (the count of the
-- window before it, sliding window only), curr, and w when times are
-- tracked. A key holds "start curr" when prev and w are 0, else "start prev
-- curr w". A stored state always has curr > 0, so it expires at the end of
-- its window (fixed window) or of the window after it (sliding window).

-- window_bounds returns the starts of the window before the one holding
-- now, of that window, and of the two after it. P is a period in µs, or for
-- calendar windows the table of six consecutive starts b1..b6 that the Go
-- side computed around its own clock: now must fall in [b2, b5), the
-- window before the Go side's, its own or the next one, which tolerates a
-- skew between the two clocks of up to a window. The window is chosen by
-- now, Redis's clock (or the caller's time), so a skewed application clock
-- cannot move a reset.
local function window_bounds(now, P)
  if type(P) == 'number' then
    local ws = now - now % P -- exact: now + P < 2^53
    return ws - P, ws, ws + P, ws + 2 * P
  end
  for i = 2, #P - 2 do
    if P[i] <= now and now < P[i + 1] then
      return P[i - 1], P[i], P[i + 1], P[i + 2]
    end
  end
  error({err = 'ERR sluice: the time ' .. format('%d', now) ..
    ' is outside the calendar windows sent (the application clock and Redis clock differ by more than a window)'})
end

-- window_roll clamps now so that it is never before the stored window and
-- returns it with the windows around it (as window_bounds) and the counts
-- of the window holding it and the one before it. A stored state always
-- has curr > 0 (or is the initial 0 0 0), so a state from an older window
-- is expired.
local function window_roll(start, prev, curr, now, P)
  if now < start then
    now = start
  end
  local pws, ws, we, wa = window_bounds(now, P)
  if start == ws then
    return now, pws, ws, we, wa, prev, curr
  elseif start == pws then
    return now, pws, ws, we, wa, curr, 0
  end
  return now, pws, ws, we, wa, 0, 0
end

-- win_load returns the state at key: start, prev, curr and w, zeros for a
-- missing key.
local function win_load(key)
  local v = call('GET', key)
  if not v then
    return 0, 0, 0, 0
  end
  local a, b, c, d = match(v, '^(%d+) (%d+) ?(%d*) ?(%d*)$')
  if not a or (c ~= '' and d == '') then
    error({err = MALFORMED .. key})
  elseif c == '' then
    return tonumber(a), 0, tonumber(b), 0
  end
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d)
end

-- win_decide runs algorithm (fixed_window or sliding_window) on the state
-- at key and returns allowed, remaining, retry, reset and delay (0), and
-- with STATE, after a refusal, {w, start, prev, curr} (see lib.lua). With
-- commit it stores an admitted request's new state, to expire when it is
-- back to initial.
local function win_decide(key, algorithm, L, P, B, now, cost, commit, maxdelay)
  local start, prev, curr, w = win_load(key)
  if now < w then
    now = w
  end
  local ok, ns, np, nc, expire, rem, retry, reset = algorithm(L, P, start, prev, curr, now, cost)
  local st
  if STATE and not ok then
    st = {TRACK and now or 0, start, prev, curr}
  end
  if not (commit and ok) then
    if not TRACK or now <= w then
      return ok, rem, retry, reset, 0, st
    end
    ns, np, nc = start, prev, curr -- only w changes
  end
  local dt = expire - now
  if dt < 0 then
    dt = 0
  end
  if np == 0 and not TRACK then
    call('SET', key, format('%d %d', ns, nc), 'PX', format('%d', floor((dt + 999) / 1000) + PAD))
  else
    call('SET', key, format('%d %d %d %d', ns, np, nc, now), 'PX', format('%d', floor((dt + 999) / 1000) + PAD))
  end
  return ok, rem, retry, reset, 0, st
end
