-- sliding_window.lua: the sliding window counter, exact.
--
-- Mirrors internal/algo/slidingwindow.go: windows as the fixed window's,
-- and the estimate prev·(we − now)/(we − ws) + curr for the window [ws, we)
-- holding now, computed as a quotient and a remainder, never rounded.
-- Admitted iff estimate + cost <= L.

-- sliding_retry_at returns the first microsecond at which a request of the
-- given cost (<= L) would be admitted if nothing else happened: solving the
-- admission inequality in this window [ws, we), then in the next [we, wa).
local function sliding_retry_at(L, ws, we, wa, prev, curr, cost)
  -- This window, of length W: prev·(we−t) <= R·W  <=>  t >= we − floor(R·W/prev).
  local W = we - ws
  local r = L - cost - curr
  if r >= 0 and prev > 0 then
    local q = W -- floor(R·W/prev) >= W when R >= prev: no need to compute it
    if r < prev then
      q = muldivmod(r, W, prev)
    end
    if q > 0 then
      if q >= W then
        return ws
      end
      return we - q
    end
  end
  -- Next window, prev' = curr, curr' = 0: curr·(wa−t) <= (L−cost)·W'.
  if curr == 0 then
    return we
  end
  local N = wa - we
  local q = N
  if L - cost < curr then
    q = muldivmod(L - cost, N, curr)
  end
  if q >= N then
    return we
  end
  return wa - q
end

-- sliding_window decides a request and returns what fixed_window returns.
local function sliding_window(L, P, start, prev, curr, now, cost)
  local pws, ws, we, wa, p, c
  now, pws, ws, we, wa, p, c = window_roll(start, prev, curr, now, P)
  -- The stored state expires at the end of the window after its own.
  local expire = 0
  if start == ws then
    expire = wa
  elseif start == pws then
    expire = we
  end
  local pq, pr = muldivmod(p, we - now, we - ws)
  -- remaining = floor(L − estimate) = L − c − ceil(p·(we−now)/(we−ws)), never below 0
  local rem = L - c - pq
  if pr > 0 then
    rem = rem - 1
  end
  local reset = 0
  if c > 0 then
    reset = wa - now
  elseif p > 0 then
    reset = we - now
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
      reset = wa - now
    end
    return true, ws, p, c, wa, rem, 0, reset
  end
  if rem < 0 then
    rem = 0
  end
  return false, start, prev, curr, expire, rem, sliding_retry_at(L, ws, we, wa, p, c, cost) - now, reset
end
