-- debit.lua: debits and refunds of every rate algorithm, for Debit, Refund
-- and the settlement of estimates (usage.lua, settle.lua).
--
-- Mirrors internal/algo/debt.go. A debit charges units whether or not they
-- fit, so a count may pass L (saturating at MAXCOUNT) and a bucket may owe
-- units (big.lua); a refund gives units back to the charge made at the
-- instant at, never below the initial state. Costs come from the Go side
-- at most 2^52 (every larger cost decides as 2^52 does: each bound it
-- meets is far below).

local MAXCOUNT = 4294967295

-- add_count returns count + cost, saturated at MAXCOUNT.
local function add_count(count, cost)
  if cost >= MAXCOUNT - count then
    return MAXCOUNT
  end
  return count + cost
end

-- win_start returns the start of the window holding the instant t, for P
-- a period or the calendar windows' starts (see window_bounds), or nil for
-- an instant before those windows (older than any window that counts).
local function win_start(t, P)
  if type(P) == 'number' then
    return t - t % P
  end
  for i = #P - 1, 1, -1 do
    if P[i] <= t then
      return P[i]
    end
  end
  return nil
end

-- win_write stores a window state at key at now: start, prev and curr,
-- back to initial at expire, or no state when prev and curr are 0.
local function win_write(key, start, prev, curr, expire, now)
  if prev == 0 and curr == 0 then
    if TRACK then
      call('SET', key, format('0 0 0 %d', now), 'PX', format('%d', PAD))
    else
      call('DEL', key)
    end
    return
  end
  local dt = expire - now
  if dt < 0 then
    dt = 0
  end
  local ttl = format('%d', floor((dt + 999) / 1000) + PAD)
  if prev == 0 and not TRACK then
    call('SET', key, format('%d %d', start, curr), 'PX', ttl)
  else
    call('SET', key, format('%d %d %d %d', start, prev, curr, now), 'PX', ttl)
  end
end

-- sliding_after returns the sliding window's verdict on counts prev and
-- curr at now in the window [ws, we) (wa the end of the next one), as
-- a debit leaves them: allowed iff the estimate is at most L, remaining,
-- retry (of a request of cost 1, when not allowed), reset, and when the
-- state is to be kept, its expiry (else 0).
local function sliding_after(L, ws, we, wa, now, prev, curr)
  local pq, pr = muldivmod(prev, we - now, we - ws)
  local est = curr + pq
  local ok = est < L or (est == L and pr == 0)
  local rem = L - est
  if rem < 0 then
    rem = 0
  end
  if pr > 0 and rem > 0 then
    rem = rem - 1
  end
  local expire = 0
  if curr > 0 then
    expire = wa
  elseif prev > 0 then
    expire = we
  else
    return ok, rem, 0, 0, 0
  end
  local retry = 0
  if not ok then
    retry = sliding_retry_at(L, ws, we, wa, prev, curr, 1) - now
  end
  return ok, rem, retry, expire - now, expire
end

-- win_usage debits cost units to the window state at key at now (refund
-- false), or refunds them to the charge made at the instant at: fixed
-- windows from the window holding at while it is current, sliding windows
-- from the current or the previous one. It writes the new state and
-- returns allowed, remaining, retry and reset.
local function win_usage(key, code, L, P, now, cost, at, refund)
  local start, prev, curr, w = win_load(key)
  if now < w then
    now = w
  end
  local pws, ws, we, wa, p, c
  now, pws, ws, we, wa, p, c = window_roll(start, prev, curr, now, P)
  local from
  if refund then
    if not at or at > now then
      at = now
    end
    from = win_start(at, P)
  end
  if code == 'fw' then
    -- window_roll reports the count of the window before as prev: a fixed
    -- window counts only c.
    if refund then
      if from == ws then
        c = c - cost
        if c < 0 then
          c = 0
        end
      end
      win_write(key, ws, 0, c, we, now)
      local rem = L - c
      if rem < 0 then
        rem = 0
      end
      if c == 0 then
        return true, rem, 0, 0
      end
      return true, rem, 0, we - now
    end
    c = add_count(c, cost)
    win_write(key, ws, 0, c, we, now)
    local rem, retry = L - c, 0
    if rem < 0 then
      rem = 0
    end
    if c > L then
      retry = we - now
    end
    return c <= L, rem, retry, we - now
  end
  if refund then
    if from == ws then
      c = c - cost
      if c < 0 then
        c = 0
      end
    elseif from == pws then
      p = p - cost
      if p < 0 then
        p = 0
      end
    end
  else
    c = add_count(c, cost)
  end
  local ok, rem, retry, reset, expire = sliding_after(L, ws, we, wa, now, p, c)
  win_write(key, ws, p, c, expire, now)
  if refund then
    return true, rem, 0, reset
  end
  return ok, rem, retry, reset
end

-- log_read returns the log at key (see sliding_log.lua) as now sees it:
-- w, and the entries that still count, oldest first, as a flat array {at,
-- cost, ...}, with their sum; now is clamped to w and the newest entry.
local function log_read(key, now, P)
  local all = call('LRANGE', key, 0, -1)
  local w = 0
  if #all >= 2 then
    w = tonumber(all[2])
    if not w then
      error({err = MALFORMED .. key})
    end
  end
  if now < w then
    now = w
  end
  local n = #all
  if n > 2 then
    local newest = tonumber(all[n - 1])
    if not newest then
      error({err = MALFORMED .. key})
    end
    if now < newest then
      now = newest
    end
  end
  local es, sum = {}, 0
  for i = 3, n - 1, 2 do
    local a, c = tonumber(all[i]), tonumber(all[i + 1])
    if not a or not c then
      error({err = MALFORMED .. key})
    end
    if now - a < P then
      es[#es + 1], es[#es + 2] = a, c
      sum = sum + c
    end
  end
  return es, sum, w, now
end

-- log_write stores the entries es (with their sum) at key at now, the log
-- expiring P after its newest entry; no entries leave no log (but w when
-- times are tracked).
local function log_write(key, es, sum, now, P)
  call('DEL', key)
  if #es == 0 then
    if TRACK then
      call('RPUSH', key, 0, format('%d', now))
      call('PEXPIRE', key, log_ttl(0))
    end
    return
  end
  local args = {format('%d', sum), format('%d', now)}
  for i = 1, #es do
    args[#args + 1] = format('%d', es[i])
    if #args >= 1024 then
      call('RPUSH', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    call('RPUSH', key, unpack(args))
  end
  call('PEXPIRE', key, log_ttl(es[#es - 1] + P - now))
end

-- log_usage debits cost units to the log at key at now (refund false),
-- whether or not they fit (the entry's cost saturating the sum at
-- MAXCOUNT), or refunds them to the entries made at or before the instant
-- at that still count, the newest first. It writes the new log and
-- returns allowed, remaining, retry and reset: a debit is allowed iff its
-- units fitted, with the retry of a request of cost 1.
local function log_usage(key, L, P, B, now, cost, at, refund)
  local es, sum, w
  es, sum, w, now = log_read(key, now, P)
  local fitted = true
  if refund then
    if not at or at > now then
      at = now
    end
    local kept = {}
    for i = #es - 1, 1, -2 do
      local a, c = es[i], es[i + 1]
      if a <= at and cost > 0 then
        local take = math.min(c, cost)
        c, cost, sum = c - take, cost - take, sum - take
      end
      if c > 0 then
        kept[#kept + 1], kept[#kept + 2] = c, a
      end
    end
    es = {}
    for i = #kept, 1, -2 do
      es[#es + 1], es[#es + 2] = kept[i], kept[i - 1]
    end
  else
    fitted = sum + cost <= L
    local c = add_count(sum, cost) - sum
    if c > 0 then
      if #es > 0 and es[#es - 1] == now then
        es[#es] = es[#es] + c
      else
        es[#es + 1], es[#es + 2] = now, c
      end
      sum = sum + c
    end
  end
  log_write(key, es, sum, now, P)
  -- The state after, as a check (cost 0, and cost 1) sees it.
  local _, rem, _, reset = sliding_log(key, nil, L, P, B, now, 0, false, -1)
  if refund then
    return true, rem, 0, reset
  end
  local ok1, _, retry1 = sliding_log(key, nil, L, P, B, now, 1, false, -1)
  if fitted or ok1 then
    return fitted, rem, 0, reset
  end
  return false, rem, retry1, reset
end

-- tat_usage debits cost units to the token-bucket family's state at key
-- at now, or refunds them (big.lua), writes the new state and returns
-- allowed, remaining, retry and reset.
local function tat_usage(key, L, P, B, now, cost, refund)
  local at, frac, w = tat_load(key)
  if now < w then
    now = w
  end
  local nat, nfrac, ok, rem, retry, reset
  if refund then
    nat, nfrac, ok, rem, retry, reset = tat_refund(L, P, B, at, frac, now, cost)
  else
    nat, nfrac, ok, rem, retry, reset = tat_debit(L, P, B, at, frac, now, cost)
  end
  tat_write(key, nat, nfrac, now)
  return ok, rem, retry, reset
end

-- usage debits (refund false) or refunds cost units to the state at key
-- of the algorithm code, at now; a refund goes to the charge made at the
-- instant at (nil: now, as the key sees it; the token-bucket family has
-- one backlog, for which at does not matter). It returns allowed, remaining, retry and reset, in µs.
local function usage(key, code, L, P, B, now, cost, at, refund)
  if code == 'fw' or code == 'sw' then
    return win_usage(key, code, L, P, now, cost, at, refund)
  elseif code == 'sl' then
    return log_usage(key, L, P, B, now, cost, at, refund)
  end
  return tat_usage(key, L, P, B, now, cost, refund)
end
