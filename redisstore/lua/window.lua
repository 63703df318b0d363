-- window.lua: what the window algorithms (fixed_window, sliding_window)
-- share: rolling the window, and their state in Redis.
--
-- Mirrors internal/algo/fixedwindow.go's Window. The window algorithms keep
-- start (the start of the window that curr counts), prev (the count of the
-- window before it, sliding window only), curr, and w when times are
-- tracked. A key holds "start curr" when prev and w are 0, else "start prev
-- curr w". A stored state always has curr > 0, so it expires span after
-- start: span is P for the fixed window and 2·P for the sliding window.

-- window_roll clamps now so that it is never before the stored window and
-- returns it with the start of the window holding it and the counts of that
-- window and the one before it.
local function window_roll(start, prev, curr, expire, now, P)
  if now < start then
    now = start
  end
  local ws = now - now % P -- exact: now + P < 2^53
  if expire <= now then
    return now, ws, 0, 0
  elseif start == ws then
    return now, ws, prev, curr
  elseif start == ws - P then
    return now, ws, curr, 0
  end
  return now, ws, 0, 0
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
