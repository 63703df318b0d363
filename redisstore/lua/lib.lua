-- lib.lua: exact integer arithmetic on Lua's numbers, shared by every
-- algorithm.
--
-- Lua numbers are IEEE doubles, exact for integers up to 2^53. Every value
-- the scripts compute is such an integer: times are microseconds below 2^52
-- (until the year 2112), limits and bursts at most 10^9 (below 2^30), periods
-- at most ten years (below 2^49 µs). The Go side refuses the policies and
-- times that would leave those ranges. Products that can exceed 2^53, such
-- as prev·(P−x) of the sliding window or backlog·L of the token bucket, go
-- through muldivmod, which splits them exactly.

local TWO52 = 4503599627370496

-- divmod returns floor(n/d) and n mod d for integers 0 <= n <= 2^52 and
-- 0 < d <= 2^50. The quotient of two doubles is rounded, so floor(n/d) may
-- be one too large; the remainder, computed exactly, corrects it.
local function divmod(n, d)
  local q = math.floor(n / d)
  local r = n - q * d
  if r < 0 then
    return q - 1, r + d
  end
  return q, r
end

-- muldivmod returns floor(a·b/d) and a·b mod d for integers 0 <= a, b <=
-- 2^52 and 0 < d <= 2^49 whose quotient is below 2^53. A product below 2^52
-- is exact and divided at once. A larger one is a·b = a·bq·d + a·br with br
-- = b mod d, and floor(a·br/d) is found digit by digit, taking a's digits in
-- base 4 from the top: every intermediate stays below 7·2^49.
local function muldivmod(a, b, d)
  local p = a * b
  if p < TWO52 then
    return divmod(p, d)
  end
  local bq, br = divmod(b, d)
  local q, r, rest, w = 0, 0, a, TWO52
  while w >= 1 do
    local digit = math.floor(rest / w)
    rest = rest - digit * w
    local k, m = divmod(r * 4 + digit * br, d)
    q, r = q * 4 + k, m
    w = w / 4
  end
  return a * bq + q, r
end

-- ceilfrac rounds q + r/L (0 <= r < L) up to whole microseconds.
local function ceilfrac(q, r)
  if r > 0 then
    return q + 1
  end
  return q
end

-- int formats an integer exactly (tostring would round it to 14 digits).
local function int(x)
  return string.format('%.0f', x)
end

-- ttl returns the lifetime in milliseconds of a key whose state is back to
-- initial dt microseconds from now: rounded up, plus 1 ms because Redis
-- counts a key's expiry from a millisecond clock that may lag the
-- microsecond one, plus pad (non-zero when the caller passes its own time,
-- which need not follow Redis's clock).
local function ttl(dt, pad)
  return math.floor((dt + 999) / 1000) + 1 + pad
end

-- malformed stops the script, with an error reply, when a key holds
-- something Sluice did not write there.
local function malformed(key)
  error({err = 'ERR sluice: malformed state at key ' .. key})
end
