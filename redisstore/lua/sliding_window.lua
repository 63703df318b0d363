-- sliding_window.lua: the sliding window counter, exact.
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
      return ws + math.max(P - q, 0)
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
  return ws + P + math.max(P - q, 0)
end

-- sliding_window decides a request and returns what fixed_window returns.
local function sliding_window(L, P, start, prev, curr, now, cost)
  local expire = 0
  if curr > 0 then
    expire = start + 2 * P
  end
  local ws
  local oldstart, oldprev, oldcurr = start, prev, curr
  now, ws, prev, curr = window_roll(start, prev, curr, expire, now, P)
  local x = now - ws
  local pq, pr = muldivmod(prev, P - x, P)
  -- floor(L − estimate) = L − curr − ceil(prev·(P−x)/P), never below 0
  local function remaining(c)
    local rem = L - c - pq
    if pr > 0 then
      rem = rem - 1
    end
    return math.max(rem, 0)
  end
  local function reset_at(p, c)
    if c > 0 then
      return ws + 2 * P
    elseif p > 0 then
      return ws + P
    end
    return now
  end
  if cost > L then
    return false, oldstart, oldprev, oldcurr, expire, remaining(curr), -1, reset_at(prev, curr) - now
  end
  local need = curr + cost + pq
  if need < L or (need == L and pr == 0) then
    curr = curr + cost
    local e = reset_at(prev, curr)
    return true, ws, prev, curr, e, remaining(curr), 0, e - now
  end
  return false, oldstart, oldprev, oldcurr, expire, remaining(curr), sliding_retry_at(L, P, ws, prev, curr, cost) - now, reset_at(prev, curr) - now
end
