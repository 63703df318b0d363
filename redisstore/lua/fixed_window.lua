-- fixed_window.lua: at most L per window [k·P, (k+1)·P) since the Unix epoch.
--
-- Mirrors internal/algo/fixedwindow.go. The window algorithms keep start
-- (the start of the window that curr counts), prev (the count of the window
-- before it, sliding window only), curr, and w, the latest time the key has
-- seen. A stored state always has curr > 0, so it expires span after start:
-- span is P for the fixed window and 2·P for the sliding window.

-- win_load returns the state at key: start, prev, curr, w (zeros for a
-- missing key).
local function win_load(key)
  local v = redis.call('GET', key)
  if not v then
    return 0, 0, 0, 0
  end
  local start, prev, curr, w = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if not start then
    malformed(key)
  end
  return tonumber(start), tonumber(prev), tonumber(curr), tonumber(w)
end

-- win_save stores the state, to expire at expire (µs).
local function win_save(key, start, prev, curr, w, expire, now, pad)
  local dt = expire - now
  if dt < 0 then
    dt = 0
  end
  redis.call('SET', key, int(start) .. ' ' .. int(prev) .. ' ' .. int(curr) .. ' ' .. int(w), 'PX', ttl(dt, pad))
end

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
