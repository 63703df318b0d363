-- tat.lua: the token-bucket family's shared core (token_bucket, gcra and
-- leaky_bucket) and its state in Redis.
--
-- Mirrors the core of internal/algo/gcra.go. The state is the theoretical
-- arrival time TAT = at + frac/L µs (0 <= frac < L), the instant the bucket
-- is full again. L and P here are the policy's limit and period divided by
-- their greatest common divisor, which changes no decision and keeps frac
-- small (usually 0). B is the burst.
--
-- A key holds "at" when frac is 0 and no w is kept, else "at frac w".

-- tat_step decides a request of the given cost: admitted iff backlog + c·T
-- <= B·T, with T = P/L. It returns allowed, the new at and frac, remaining,
-- retry (µs, -1 for never), reset (µs) and the backlog before the request
-- rounded up to the µs (an admitted leaky-bucket request's delay).
--
-- A backlog beyond B·T is a debt (left by a debit, see big.lua): every
-- request is refused, with nothing remaining, and retry, reset and the
-- backlog are pairs {h, l} (tat_debt), which the caller turns into reply
-- numbers (b_reply). at is a number, or such a pair from 2^53.
local function tat_step(L, P, B, at, frac, now, cost)
  local hq, hr = muldivmod(B, P, L)
  if type(at) == 'table' or at - hq > now or (at - hq == now and frac > hr) then
    local bh, bl, br = tat_backlog(at, frac, now)
    local retry, reset, wait = tat_debt(L, P, B, bh, bl, br, cost)
    return false, at, frac, 0, retry, reset, wait
  end
  local bq, br = 0, 0
  if at > now or (at == now and frac > 0) then
    bq, br = at - now, frac
  end
  local wait = bq
  if br > 0 then
    wait = bq + 1
  end
  if cost > B then
    return false, at, frac, tat_remaining(L, P, B, bq, br), -1, wait, wait
  end
  local cq, cr = muldivmod(cost, P, L)
  local nq, nr = bq + cq, br + cr
  if nr >= L then
    nq, nr = nq + 1, nr - L
  end
  if nq < hq or (nq == hq and nr <= hr) then
    -- The new state is max(tat, now) + c·T.
    local na, nf = now + cq, cr
    if bq > 0 or br > 0 then
      na, nf = at + cq, frac + cr
      if nf >= L then
        na, nf = na + 1, nf - L
      end
    end
    local reset = nq
    if nr > 0 then
      reset = nq + 1
    end
    return true, na, nf, tat_remaining(L, P, B, nq, nr), 0, reset, wait
  end
  -- Denied: wait until the backlog has drained by the excess over B·T.
  local eq, er = nq - hq, nr - hr
  if er < 0 then
    eq, er = eq - 1, er + L
  end
  if er > 0 then
    eq = eq + 1
  end
  return false, at, frac, tat_remaining(L, P, B, bq, br), eq, wait, wait
end

-- tat_load returns the state at key: at, frac and w, zeros for a missing
-- key. A key holds "at" when frac is 0 and no w is kept, else "at frac w".
-- at is a number, or from 2^53 a pair {h, l} (see big.lua).
local function tat_load(key)
  local v = call('GET', key)
  if not v then
    return 0, 0, 0
  end
  local a, f, w = v, 0, 0
  local at = tonumber(v)
  if not at then
    a, f, w = match(v, '^(%d+) (%d+) (%d+)$')
    if not a then
      error({err = MALFORMED .. key})
    end
    at, f, w = tonumber(a), tonumber(f), tonumber(w)
  end
  if at >= TWO53 then
    at = {b_parse(a)}
  end
  return at, f, w
end

-- tat_write stores the state at, frac (at a number or a pair {h, l}) at
-- key at now, to expire when the bucket is full again: deleted when it is
-- (at 0).
local function tat_write(key, at, frac, now)
  if at == 0 and frac == 0 and not TRACK then
    call('DEL', key)
    return
  end
  local ah, al = tat_at(at)
  local nh, nl = b_of(now)
  local dh, dl = 0, 0
  if b_lt(nh, nl, ah, al) or (ah == nh and al == nl and frac > 0) then
    dh, dl = t_ceil(t_sub(ah, al, frac, nh, nl, 0, 1))
  end
  local ttl = format('%d', b_ms(dh, dl) + PAD)
  if frac == 0 and not TRACK then
    call('SET', key, b_fmt(ah, al), 'PX', ttl)
  else
    call('SET', key, b_fmt(ah, al) .. format(' %d %d', frac, now), 'PX', ttl)
  end
end

-- tat_decide runs algorithm (token_bucket, gcra or leaky_bucket) on the
-- state at key and returns allowed, remaining, retry, reset and delay, and
-- with STATE, after a refusal, {w, at, frac} (see lib.lua). With commit it
-- stores an admitted request's new state, to expire when the bucket is
-- full again.
local function tat_decide(key, algorithm, L, P, B, now, cost, commit, maxdelay)
  local at, frac, w = tat_load(key)
  if now < w then
    now = w
  end
  local ok, nat, nfrac, rem, retry, reset, delay = algorithm(L, P, B, at, frac, now, cost, maxdelay)
  if type(reset) == 'table' then
    -- In debt: pairs of µs.
    reset = b_reply(reset[1], reset[2])
    if retry ~= -1 then
      retry = b_reply(retry[1], retry[2])
    end
  end
  local st
  if STATE and not ok and type(at) ~= 'table' then
    -- With TRACK, now is what the key's w is after this call. A state
    -- from 2^53 is not sent: its at is not a reply number.
    st = {TRACK and now or 0, at, frac}
  end
  if not (commit and ok) then
    if not TRACK or now <= w then
      return ok, rem, retry, reset, delay, st
    end
    tat_write(key, at, frac, now) -- only w changes
    return ok, rem, retry, reset, delay, st
  end
  local dt = nat - now
  if nfrac > 0 then
    dt = dt + 1
  end
  if dt < 0 then
    dt = 0
  end
  -- Numbers go to Redis as strings made by format('%d'), which prints an
  -- integer below 2^53 exactly (Redis's Lua prints it through a C long,
  -- 64 bits on a 64-bit build) and costs Redis less than a number argument
  -- (formatted with %.17g) or '%.0f'.
  if nfrac == 0 and not TRACK then
    call('SET', key, format('%d', nat), 'PX', format('%d', floor((dt + 999) / 1000) + PAD))
  else
    call('SET', key, format('%d %d %d', nat, nfrac, now), 'PX', format('%d', floor((dt + 999) / 1000) + PAD))
  end
  return ok, rem, retry, reset, delay, st
end
