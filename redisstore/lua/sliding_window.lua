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
