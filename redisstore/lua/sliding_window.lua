-- sliding_window.lua: the sliding window counter, exact, and the window
-- algorithms' I/O.
--
-- Mirrors internal/algo/slidingwindow.go: windows aligned as the fixed
-- window's, and the estimate prev·(P − (now − ws))/P + curr computed as a
-- quotient and a remainder, never rounded. Admitted iff estimate + cost <= L.

-- sliding_retry_at returns the first microsecond at which a request of the
-- given cost (<= L) would be admitted if nothing else happened: solving the
-- admission inequality in this window, then in the next one.
local function sliding_retry_at(L, P, ws, prev, curr, cost)
  -- This window: prev·(P−x) <= R·P  <=>  x >= P − floor(R·P/prev).
  local r = L - cost - curr
  if r >= 0 and prev > 0 then
    local q = P -- floor(R·P/prev) >= P when R >= prev: no need to compute it
    if r < prev then
      q = muldivmod(r, P, prev)
    end
    if q > 0 then
      if q >= P then
        return ws
      end
      return ws + P - q
    end
  end
  -- Next window: prev' = curr, curr' = 0: curr·(P−y) <= (L−cost)·P.
  if curr == 0 then
    return ws + P
  end
  local q = P
  if L - cost < curr then
    q = muldivmod(L - cost, P, curr)
  end
  if q >= P then
    return ws + P
  end
  return ws + 2 * P - q
end

-- sliding_window decides a request and returns what fixed_window returns.
local function sliding_window(L, P, start, prev, curr, now, cost)
  local expire = 0
  if curr > 0 then
    expire = start + 2 * P
  end
  local ws, p, c
  now, ws, p, c = window_roll(start, prev, curr, expire, now, P)
  local pq, pr = muldivmod(p, P - (now - ws), P)
  -- remaining = floor(L − estimate) = L − c − ceil(p·(P−x)/P), never below 0
  local rem = L - c - pq
  if pr > 0 then
    rem = rem - 1
  end
  local reset = 0
  if c > 0 then
    reset = ws + 2 * P - now
  elseif p > 0 then
    reset = ws + P - now
  end
  if cost > L then
    if rem < 0 then
      rem = 0
    end
    return false, start, prev, curr, expire, rem, -1, reset
  end
  local need = c + cost + pq
  if need < L or (need == L and pr == 0) then
    rem = rem - cost
    if rem < 0 then
      rem = 0
    end
    c = c + cost
    if c > 0 then
      reset = ws + 2 * P - now
    end
    return true, ws, p, c, ws + 2 * P, rem, 0, reset
  end
  if rem < 0 then
    rem = 0
  end
  return false, start, prev, curr, expire, rem, sliding_retry_at(L, P, ws, p, c, cost) - now, reset
end

-- win_load returns the state at key: start, prev, curr and w, zeros for a
-- missing key.
local function win_load(key)
  local v = call('GET', key)
  if not v then
    return 0, 0, 0, 0
  end
  local a, b, c, d = match(v, '^(%d+) (%d+) ?(%d*) ?(%d*)$')
  if not a then
    malformed(key)
  elseif c == '' then
    return tonumber(a), 0, tonumber(b), 0
  end
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d) or malformed(key)
end

-- win_decide runs the algorithm alg (fw or sw) on the state at key and
-- returns allowed, remaining, retry, reset and delay (0). With commit it
-- stores an admitted request's new state, to expire when it is back to
-- initial.
local function win_decide(key, alg, L, P, B, now, cost, commit, maxdelay)
  local start, prev, curr, w = win_load(key)
  if now < w then
    now = w
  end
  local ok, ns, np, nc, expire, rem, retry, reset
  if alg == 'fw' then
    ok, ns, np, nc, expire, rem, retry, reset = fixed_window(L, P, start, curr, now, cost)
  else
    ok, ns, np, nc, expire, rem, retry, reset = sliding_window(L, P, start, prev, curr, now, cost)
  end
  if not (commit and ok) then
    if not TRACK or now <= w then
      return ok, rem, retry, reset, 0
    end
    ns, np, nc = start, prev, curr -- only w changes
  end
  if np == 0 and not TRACK then
    call('SET', key, format('%.0f %.0f', ns, nc), 'PX', ttl(expire - now))
  else
    call('SET', key, format('%.0f %.0f %.0f %.0f', ns, np, nc, now), 'PX', ttl(expire - now))
  end
  return ok, rem, retry, reset, 0
end
