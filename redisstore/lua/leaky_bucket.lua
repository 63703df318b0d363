-- leaky_bucket.lua: a queue drained at one cost unit every T = P/L, and the
-- token-bucket family's I/O.
--
-- Mirrors internal/algo/leakybucket.go: admission as the token bucket's, and
-- an admitted request waits delay = the backlog before it. maxdelay, when
-- not negative, is the caller's MaxDelay in whole microseconds (rounded
-- down): a request whose delay exceeds it is refused, leaving the state
-- unchanged, with the delay it would have had and a retry that says when the
-- queue will be short enough. A request refused for want of room has delay
-- 0, and the later of the two retries.
local function leaky_bucket(L, P, B, at, frac, now, cost, maxdelay)
  local ok, nat, nfrac, rem, retry, reset, wait = tat_step(L, P, B, at, frac, now, cost)
  if maxdelay >= 0 and wait > maxdelay and retry ~= -1 then
    local short = wait - maxdelay
    if not ok then
      if short > retry then
        retry = short
      end
      return false, at, frac, rem, retry, reset, 0
    end
    local _, _, _, prem, _, preset = tat_step(L, P, B, at, frac, now, 0)
    return false, at, frac, prem, short, preset, wait
  end
  if not ok then
    wait = 0
  end
  return ok, nat, nfrac, rem, retry, reset, wait
end

-- tat_load returns the state at key: at, frac and w, zeros for a missing
-- key.
local function tat_load(key)
  local v = call('GET', key)
  if not v then
    return 0, 0, 0
  end
  local at = tonumber(v)
  if at then
    return at, 0, 0
  end
  local a, f, w = match(v, '^(%d+) (%d+) (%d+)$')
  if not a then
    malformed(key)
  end
  return tonumber(a), tonumber(f), tonumber(w)
end

-- tat_decide runs the algorithm alg (tb, gcra or lb) on the state at key
-- and returns allowed, remaining, retry, reset and delay. With commit it
-- stores an admitted request's new state, to expire when the bucket is full
-- again.
local function tat_decide(key, alg, L, P, B, now, cost, commit, maxdelay)
  local at, frac, w = tat_load(key)
  if now < w then
    now = w
  end
  local ok, nat, nfrac, rem, retry, reset, delay
  if alg == 'lb' then
    ok, nat, nfrac, rem, retry, reset, delay = leaky_bucket(L, P, B, at, frac, now, cost, maxdelay)
  elseif alg == 'gcra' then
    ok, nat, nfrac, rem, retry, reset, delay = gcra(L, P, B, at, frac, now, cost)
  else
    ok, nat, nfrac, rem, retry, reset, delay = token_bucket(L, P, B, at, frac, now, cost)
  end
  if not (commit and ok) then
    if not TRACK or now <= w then
      return ok, rem, retry, reset, delay
    end
    nat, nfrac = at, frac -- only w changes
  end
  local expiry = nat
  if nfrac > 0 then
    expiry = nat + 1
  end
  if nfrac == 0 and not TRACK then
    -- A number argument reaches Redis as its exact digits (Redis formats
    -- it with %.17g, or as the shortest string that reads back the same),
    -- which tonumber reads back exactly; it is cheaper than format.
    call('SET', key, nat, 'PX', ttl(expiry - now))
  else
    call('SET', key, format('%.0f %.0f %.0f', nat, nfrac, now), 'PX', ttl(expiry - now))
  end
  return ok, rem, retry, reset, delay
end
