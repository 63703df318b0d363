-- big.lua: the token-bucket family in debt (debits, refunds, and decisions
-- on a bucket that owes units), whose times pass 2^53 µs.
--
-- Mirrors internal/algo/debt.go and the debt branch of gcra.go. A debit
-- may leave a backlog of up to 2^61 µs (MaxBacklogMicros), so TAT = at +
-- frac/L may pass 2^53, where Lua's numbers stop being exact integers.
-- Such values are pairs (h, l) of exact numbers meaning h·10^8 + l, with
-- 0 <= l < 10^8 and h < 2^40 (every value here is below 2^63); a TAT
-- quantity adds a remainder r in 1/L µs (0 <= r < L). A key's at below
-- 2^53 stays a number, so the states of every bucket not deep in debt
-- read and write as before; a larger at is stored in decimal, read back
-- exactly by b_parse.

local BE = 100000000
local TWO53 = 9007199254740992

-- tat_remaining returns B − ceil(backlog/T) = B − ceil((q·L + r)/P) for a
-- backlog of q µs plus r/L µs within B·T (q < 2^52). y + r < 2^50, so the
-- division is exact.
local function tat_remaining(L, P, B, q, r)
  local x, y = muldivmod(q, L, P)
  if y + r > 0 then
    return B - x - floor((y + r - 1) / P) - 1
  end
  return B - x
end

-- b_of returns a number 0 <= x < 2^53 as a pair.
local function b_of(x)
  local h = floor(x / BE)
  local l = x - h * BE
  if l < 0 then
    h, l = h - 1, l + BE
  elseif l >= BE then
    h, l = h + 1, l - BE
  end
  return h, l
end

-- b_parse returns the decimal string s (at most 19 digits) as a pair.
local function b_parse(s)
  local n = #s
  if n <= 15 then
    return b_of(tonumber(s))
  end
  return tonumber(string.sub(s, 1, n - 8)), tonumber(string.sub(s, n - 7))
end

-- b_fmt returns the pair (h, l) in decimal.
local function b_fmt(h, l)
  if h == 0 then
    return format('%d', l)
  end
  return format('%d%08d', h, l)
end

-- b_lt reports whether (ah, al) < (bh, bl).
local function b_lt(ah, al, bh, bl)
  return ah < bh or (ah == bh and al < bl)
end

-- t_add and t_sub add and subtract TAT quantities (h, l, r), r in 1/L µs;
-- t_sub's a is at least its b.
local function t_add(ah, al, ar, bh, bl, br, L)
  local h, l, r = ah + bh, al + bl, ar + br
  if r >= L then
    l, r = l + 1, r - L
  end
  if l >= BE then
    h, l = h + 1, l - BE
  end
  return h, l, r
end

local function t_sub(ah, al, ar, bh, bl, br, L)
  local h, l, r = ah - bh, al - bl, ar - br
  if r < 0 then
    l, r = l - 1, r + L
  end
  if l < 0 then
    h, l = h - 1, l + BE
  end
  return h, l, r
end

-- t_lt reports whether a < b for TAT quantities.
local function t_lt(ah, al, ar, bh, bl, br)
  return ah < bh or (ah == bh and (al < bl or (al == bl and ar < br)))
end

-- t_ceil rounds a TAT quantity up to whole µs, as a pair.
local function t_ceil(h, l, r)
  if r > 0 then
    l = l + 1
    if l >= BE then
      h, l = h + 1, l - BE
    end
  end
  return h, l
end

-- b_reply returns the pair (h, l), a number of µs, as the scripts reply
-- it: itself below 2^53; above, rounded up to whole milliseconds (then
-- exact, and what the Go side reads as a duration rounds to the same
-- milliseconds), or 2^62 past the longest duration, which the Go side
-- saturates alike.
local function b_reply(h, l)
  if h <= 90071991 then
    return h * BE + l
  end
  local ms = h * 100000 + floor((l + 999) / 1000)
  if ms > 9223372036854 then
    return 4611686018427387904
  end
  return ms * 1000
end

-- b_ms returns the pair (h, l) µs in whole milliseconds, rounded up.
local function b_ms(h, l)
  return h * 100000 + floor((l + 999) / 1000)
end

-- Bounds, as pairs: MaxBacklogMicros (2^61) and the longest duration in
-- µs (math.MaxInt64/1000, to which Go's delays saturate).
local MAXB_H, MAXB_L = 23058430092, 13693952
local MDU_H, MDU_L = 92233720, 36854775

-- tat_cost returns c·T = c·P/L (c <= 2^52) as a TAT quantity, or nil when
-- it is 2^62 or more (more than any backlog).
local function tat_cost(c, L, P)
  local tq = floor(P / L)
  local tr = P - tq * L
  local q2, r2 = muldivmod(c, tr, L)
  if c * tq >= 4611686018427387904 then
    return nil
  end
  local th = floor(tq / BE)
  local tl = tq - th * BE
  local m1, m0 = muldivmod(c, tl, BE)
  local h, l = c * th + m1, m0
  local qh, ql = b_of(q2)
  h, l = h + qh, l + ql
  if l >= BE then
    h, l = h + 1, l - BE
  end
  return h, l, r2
end

-- tat_at returns a key's at, a number or a pair {h, l}, as a pair.
local function tat_at(at)
  if type(at) == 'table' then
    return at[1], at[2]
  end
  return b_of(at)
end

-- tat_backlog returns max(tat − now, 0) as a TAT quantity, read as 2^61
-- when longer (a clock that stepped back).
local function tat_backlog(at, frac, now)
  local ah, al = tat_at(at)
  local nh, nl = b_of(now)
  -- at − 2^61 > now, or equal with frac > 0
  local sh, sl = nh + MAXB_H, nl + MAXB_L
  if sl >= BE then
    sh, sl = sh + 1, sl - BE
  end
  if b_lt(sh, sl, ah, al) or (ah == sh and al == sl and frac > 0) then
    return MAXB_H, MAXB_L, 0
  end
  if b_lt(nh, nl, ah, al) or (ah == nh and al == nl and frac > 0) then
    return t_sub(ah, al, frac, nh, nl, 0, 1)
  end
  return 0, 0, 0
end

-- tat_debt decides a request of cost units on a bucket in debt, whose
-- backlog (bh, bl, br) passes B·T: refused, with nothing remaining. It
-- returns retry (-1 for a cost above B), reset and the backlog rounded up
-- (a leaky-bucket request's wait), each a pair {h, l} of µs.
local function tat_debt(L, P, B, bh, bl, br, cost)
  local reset = {t_ceil(bh, bl, br)}
  if cost > B then
    return -1, reset, reset
  end
  local cq, cr = muldivmod(cost, P, L)
  local hq, hr = muldivmod(B, P, L)
  local ch, cl = b_of(cq)
  local hh, hl = b_of(hq)
  local eh, el, er = t_add(bh, bl, br, ch, cl, cr, L)
  eh, el, er = t_sub(eh, el, er, hh, hl, hr, L)
  return {t_ceil(eh, el, er)}, reset, reset
end

-- tat_owed returns the verdict on a bucket whose backlog is n after a
-- debit or a refund: allowed iff within B·T, remaining, retry (a request
-- of cost 1, when not allowed; else 0) and reset, the last two as reply
-- numbers (see b_reply).
local function tat_owed(L, P, B, nh, nl, nr)
  local hq, hr = muldivmod(B, P, L)
  local hh, hl = b_of(hq)
  local reset = b_reply(t_ceil(nh, nl, nr))
  if not t_lt(hh, hl, hr, nh, nl, nr) then
    return true, tat_remaining(L, P, B, nh * BE + nl, nr), 0, reset
  end
  -- Wait until backlog + T <= B·T.
  local th, tl, tr = tat_cost(1, L, P)
  local eh, el, er = t_add(nh, nl, nr, th, tl, tr, L)
  eh, el, er = t_sub(eh, el, er, hh, hl, hr, L)
  return false, 0, b_reply(t_ceil(eh, el, er)), reset
end

-- tat_most returns the longest backlog a debit may leave: B·T plus
-- (2^32 − 1)·T, or 2^61 if that is shorter.
local function tat_most(L, P, B)
  local dh, dl, dr = tat_cost(4294967295, L, P)
  if not dh then
    return MAXB_H, MAXB_L, 0
  end
  local hq, hr = muldivmod(B, P, L)
  local hh, hl = b_of(hq)
  local mh, ml, mr = t_add(hh, hl, hr, dh, dl, dr, L)
  if t_lt(MAXB_H, MAXB_L, 0, mh, ml, mr) then
    return MAXB_H, MAXB_L, 0
  end
  return mh, ml, mr
end

-- tat_debit charges cost units (1 <= cost <= 2^52) to the state at, frac
-- at now, whether or not they fit, up to tat_most. It returns the new at
-- (a number, or a pair {h, l} from 2^53) and frac, and allowed,
-- remaining, retry and reset (tat_owed).
local function tat_debit(L, P, B, at, frac, now, cost)
  local bh, bl, br = tat_backlog(at, frac, now)
  local nh, nl, nr = tat_most(L, P, B)
  local ch, cl, cr = tat_cost(math.min(cost, 4294967295), L, P)
  if ch then
    local sh, sl, sr = t_add(bh, bl, br, ch, cl, cr, L)
    if t_lt(sh, sl, sr, nh, nl, nr) then
      nh, nl, nr = sh, sl, sr
    end
  end
  local wh, wl = b_of(now)
  local ah, al, af = t_add(wh, wl, 0, nh, nl, nr, L)
  local oh, ol = tat_at(at)
  if t_lt(ah, al, af, oh, ol, frac) then
    ah, al, af = oh, ol, frac -- a backlog read short (a clock that stepped back) stays
  end
  local nat = {ah, al}
  if ah <= 90071991 then
    nat = ah * BE + al
  end
  return nat, af, tat_owed(L, P, B, nh, nl, nr)
end

-- tat_refund gives cost units (1 <= cost <= 2^52) back to the state at,
-- frac at now: backlog − cost·T, floored at 0 (at 0: the initial state,
-- returned as at 0). It returns what tat_debit returns, allowed always.
local function tat_refund(L, P, B, at, frac, now, cost)
  local bh, bl, br = tat_backlog(at, frac, now)
  local ch, cl, cr = tat_cost(cost, L, P)
  if not ch or not t_lt(ch, cl, cr, bh, bl, br) then
    return 0, 0, true, B, 0, 0
  end
  local nh, nl, nr = t_sub(bh, bl, br, ch, cl, cr, L)
  local wh, wl = b_of(now)
  local ah, al = nh + wh, nl + wl
  if al >= BE then
    ah, al = ah + 1, al - BE
  end
  local nat = {ah, al}
  if ah <= 90071991 then
    nat = ah * BE + al
  end
  local _, rem, _, reset = tat_owed(L, P, B, nh, nl, nr)
  return nat, nr, true, rem, 0, reset
end
