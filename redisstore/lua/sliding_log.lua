-- sliding_log.lua: at most L in any interval of length P, by remembering
-- every admitted request.
--
-- Mirrors internal/algo/slidinglog.go. The log is a Redis list: the summed
-- cost of the entries it holds, w (the latest time the key has seen), then
-- one (at, cost) pair per entry, oldest first. Requests admitted in the same
-- microsecond share one entry. An entry admitted at s counts at t iff
-- t − s < P. Entries are walked from the oldest in chunks of LOG_CHUNK, so a
-- decision reads only the entries that no longer count (each dropped once)
-- and, when it denies, the few it must skip to find its retry.

local LOG_CHUNK = 32

-- LOG_STATE_MAX is the most entries a refusal's state carries (STATE, see
-- lib.lua): a longer log is not worth its reply, and no state is sent.
local LOG_STATE_MAX = 1024

-- log_state returns {w, at, cost, ...} for the entries from entry first
-- (0-based) of the n the log at key holds, or nil when they are too many.
local function log_state(key, w, first, n)
  if n - first > LOG_STATE_MAX then
    return nil
  end
  local st = {w}
  if n > first then
    local es = call('LRANGE', key, 2 + 2 * first, -1)
    for i = 1, #es do
      st[i + 1] = tonumber(es[i])
    end
  end
  return st
end

-- log_ttl returns the TTL in ms of a log whose state is back to initial dt
-- µs from now (see PAD in lib.lua).
local function log_ttl(dt)
  if dt < 0 then
    dt = 0
  end
  return format('%d', floor((dt + 999) / 1000) + PAD)
end

-- log_chunk returns up to LOG_CHUNK entries from entry j (0-based) as a flat
-- array {at, cost, at, cost, ...}.
local function log_chunk(key, j)
  return call('LRANGE', key, 2 + 2 * j, 1 + 2 * (j + LOG_CHUNK))
end

-- sliding_log decides a request on the log at key (algorithm is unused: it
-- has the signature of tat_decide and win_decide) and returns allowed,
-- remaining, retry (µs, -1 for never), reset (µs) and delay (0), and with
-- STATE, after a refusal, {w, at, cost, ...}: the entries that count (see
-- lib.lua and LOG_STATE_MAX). With
-- commit it records an admitted request and drops the entries that no
-- longer count; when times are tracked it records now as the latest time
-- seen even when nothing else changes.
local function sliding_log(key, algorithm, L, P, B, now, cost, commit, maxdelay)
  local head = call('LRANGE', key, 0, 2)
  local sum, w = 0, 0
  if #head >= 2 then
    sum, w = tonumber(head[1]), tonumber(head[2])
    if not sum or not w then
      error({err = MALFORMED .. key})
    end
  end
  if now < w then
    now = w
  end
  local has = #head == 3
  local first, newest, newest_cost, any = 0, 0, 0, false
  if has then
    local tail = call('LRANGE', key, -2, -1)
    newest, newest_cost = tonumber(tail[1]), tonumber(tail[2])
    local oldest = tonumber(head[3])
    if not newest or not newest_cost or not oldest then
      error({err = MALFORMED .. key})
    end
    if now < newest then
      now = newest
    end
    if now - oldest >= P then
      -- Skip the entries that no longer count.
      while true do
        local c = log_chunk(key, first)
        local k = 1
        while k < #c and now - tonumber(c[k]) >= P do
          sum = sum - tonumber(c[k + 1])
          first, k = first + 1, k + 2
        end
        if k < #c or #c < 2 * LOG_CHUNK then
          break
        end
      end
    end
    any = now - newest < P
  end

  -- A debit may leave sum above L (see usage.lua): nothing remains.
  local ok, rem, retry, reset = false, L - sum, 0, 0
  if rem < 0 then
    rem = 0
  end
  if any then
    reset = newest + P - now
  end
  if cost > L then
    retry = -1
  elseif sum + cost <= L then
    ok, rem = true, L - sum - cost
    if cost > 0 then
      reset = P
    end
  else
    -- Drop entries oldest first until the rest leaves room for cost; the
    -- request passes once the last dropped entry stops counting.
    local rest, j, last = sum, first, 0
    while rest + cost > L do
      local c = log_chunk(key, j)
      if #c < 2 then
        error({err = MALFORMED .. key})
      end
      local k = 1
      while k < #c and rest + cost > L do
        last, rest = tonumber(c[k]), rest - tonumber(c[k + 1])
        j, k = j + 1, k + 2
      end
    end
    retry = last + P - now
  end
  local st
  if STATE and not ok then
    -- Read before the writes below, which keep the same entries.
    local n = 0
    if has then
      n = (call('LLEN', key) - 2) / 2
    end
    st = log_state(key, TRACK and now or 0, first, n)
  end

  local push = commit and ok and cost > 0
  if push and not has then
    -- A new log (a key holding only w counts as empty).
    if #head > 0 then
      call('DEL', key)
    end
    call('RPUSH', key, format('%d', cost), format('%d', now), format('%d', now), format('%d', cost))
    call('PEXPIRE', key, log_ttl(P))
  elseif commit and not push and not any then
    -- Nothing counts any more: the log is back to initial.
    if #head > 0 then
      call('DEL', key)
    end
    if TRACK then
      call('RPUSH', key, 0, format('%d', now))
      call('PEXPIRE', key, log_ttl(0))
    end
  elseif push or (commit and first > 0) then
    local total, expiry = sum, newest + P
    if push then
      if newest == now then
        call('LSET', key, -1, format('%d', newest_cost + cost))
      else
        call('RPUSH', key, format('%d', now), format('%d', cost))
      end
      total, expiry = sum + cost, now + P
    end
    if first > 0 then
      call('LTRIM', key, 2 * first, -1)
    end
    call('LSET', key, 0, format('%d', total))
    call('LSET', key, 1, format('%d', now))
    call('PEXPIRE', key, log_ttl(expiry - now))
  elseif TRACK and (#head == 0 or now > w) then
    if #head == 0 then
      call('RPUSH', key, 0, format('%d', now))
      call('PEXPIRE', key, log_ttl(0))
    else
      call('LSET', key, 1, format('%d', now))
      call('PEXPIRE', key, log_ttl(newest + P - now))
    end
  end
  return ok, rem, retry, reset, 0, st
end
