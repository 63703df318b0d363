-- muldivmod.lua: exact integer products and quotients on Lua's numbers,
-- which every script needs (see lib.lua for the ranges of the values).

local floor = math.floor
local TWO52 = 4503599627370496

-- muldivmod returns floor(a·b/d) and a·b mod d for integers 0 <= a, b <=
-- 2^52 and 0 < d <= 2^49 whose quotient is below 2^53. A product below 2^52
-- is exact, and so is floor(p/d) for it: the quotient of two doubles is
-- rounded, but an integer n with n + d < 2^53 is never within rounding of
-- the next multiple of d. A larger product is a·b = a·bq·d + a·br with br =
-- b mod d, and floor(a·br/d) is found digit by digit, taking a's digits in
-- base 4 from the top: every intermediate stays below 7·2^49.
local function muldivmod(a, b, d)
  local p = a * b
  if p < TWO52 then
    local q = floor(p / d)
    return q, p - q * d
  end
  local bq = floor(b / d)
  local br = b - bq * d
  local q, r, rest, w = 0, 0, a, TWO52
  while w >= 1 do
    local digit = floor(rest / w)
    rest = rest - digit * w
    local t = r * 4 + digit * br
    local k = floor(t / d)
    q, r = q * 4 + k, t - k * d
    w = w / 4
  end
  return a * bq + q, r
end
