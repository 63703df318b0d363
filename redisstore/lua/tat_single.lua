-- tat_single.lua: one request (Allow or Peek) on one key of the
-- token-bucket family (token_bucket, gcra, leaky_bucket), as one straight
-- run of code.
--
-- It decides exactly as single.lua joined to tat.lua and the algorithm's
-- file would (tat_decide, tat_step, and leaky_bucket's MaxDelay), written
-- out without their functions: Lua makes every function of a script anew
-- on each call, and Redis runs this script for most decisions, so it
-- defines only muldivmod (muldivmod.lua). Its arguments come packed in one
-- MessagePack string, which Redis's cmsgpack decodes without strtod, the
-- costliest part of reading a number from a string argument. The Go side
-- puts `local STATE` and `local MAXDELAY` (true for the leaky bucket)
-- before muldivmod.lua and this file.
--
-- Why this file exists beside tat.lua: it pays for itself. Counted with
-- redis-server under callgrind (docs/BENCHMARKS.md, "Redis's instructions
-- per decision"), a lone GCRA decision costs Redis 64.5k instructions
-- through this script and 77.7k through single.lua over tat.lua (token
-- bucket 65.0k against 77.1k, leaky bucket 63.7k against 76.9k): 17% of
-- Redis's work on the commonest call, and without it redis_rate's 69.0k
-- would beat Sluice. The differential tests hold both to the memory
-- store's decisions: this script through Allow, tat.lua through AllowAll.
--
-- KEYS[1]: the state key.
-- ARGV[1]: MessagePack of L, P (µs), B, cost, maxdelay (µs, -1 for none),
--   peek (true: Peek, which charges nothing) and now (µs since the Unix
--   epoch, or nil for Redis's TIME): see lib.lua for now, and tat.lua for
--   L, P, B and the state.
-- Reply: as single.lua's (see reply in lib.lua).

if redis.replicate_commands then
  redis.replicate_commands() -- Redis < 7: replicate the effects, not the script
end

local call, format = redis.call, string.format
local key = KEYS[1]
local L, P, B, cost, maxdelay, peek, now = cmsgpack.unpack(ARGV[1])
local TRACK, PAD, NOW = now ~= nil, 1, now
if TRACK then
  PAD = 3600001
else
  local t = call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = NOW
end

-- The state (tat_load).
local at, frac, w = 0, 0, 0
local v = call('GET', key)
if v then
  at = tonumber(v)
  if not at then
    local a, f, lw = string.match(v, '^(%d+) (%d+) (%d+)$')
    if not a then
      error({err = 'ERR sluice: malformed state at key ' .. key})
    end
    at, frac, w = tonumber(a), tonumber(f), tonumber(lw)
    if now < w then
      now = w
    end
  end
end

-- The decision (tat_step): the backlog bq + br/L µs, and whether the
-- request's c·T fits in B·T on top of it. A backlog beyond B·T is a debt
-- (see big.lua), whose at may pass 2^53 (then at here is rounded, and
-- still beyond): this script leaves it to tat.lua, replying 2 alone, and
-- the store sends the request again to the AllowAll script.
local hq, hr = muldivmod(B, P, L)
local d = at - hq
if d > now or (d == now and frac > hr) then
  return {2}
end
local bq, br = 0, 0
if at > now or (at == now and frac > 0) then
  bq, br = at - now, frac
end
local wait = bq
if br > 0 then
  wait = bq + 1
end
-- Refused unless it fits: the state stays, reset is the backlog, and
-- remaining counts the backlog rq + rr/L µs.
local ok, nat, nfrac, retry, reset, rq, rr = false, at, frac, -1, wait, bq, br
if cost <= B then
  local cq, cr = muldivmod(cost, P, L)
  local nq, nr = bq + cq, br + cr
  if nr >= L then
    nq, nr = nq + 1, nr - L
  end
  if nq < hq or (nq == hq and nr <= hr) then
    -- The new state is max(tat, now) + c·T.
    ok, nat, nfrac, retry, reset, rq, rr = true, now + cq, cr, 0, nq, nq, nr
    if bq > 0 or br > 0 then
      nat, nfrac = at + cq, frac + cr
      if nfrac >= L then
        nat, nfrac = nat + 1, nfrac - L
      end
    end
    if nr > 0 then
      reset = nq + 1
    end
  else
    -- Wait until the backlog has drained by the excess over B·T.
    local eq, er = nq - hq, nr - hr
    if er < 0 then
      eq, er = eq - 1, er + L
    end
    if er > 0 then
      eq = eq + 1
    end
    retry = eq
  end
end

-- The leaky bucket (leaky_bucket.lua): an admitted request waits the
-- backlog before it, and one that would wait longer than maxdelay is
-- refused, the state as it is, reporting what a request of cost 0 would
-- see (the backlog), its delay, and a retry when the queue is short
-- enough.
local delay = 0
if MAXDELAY then
  if maxdelay >= 0 and wait > maxdelay and retry ~= -1 then
    local short = wait - maxdelay
    if ok then
      ok, nat, nfrac, retry, reset, rq, rr, delay = false, at, frac, short, wait, bq, br, wait
    elseif short > retry then
      retry = short
    end
  elseif ok then
    delay = wait
  end
end

-- remaining = B − ceil(backlog/T) = B − ceil((rq·L + rr)/P) (tat_remaining);
-- y + rr < 2^50, so the division is exact.
local x, y = muldivmod(rq, L, P)
local rem = B - x
if y + rr > 0 then
  rem = B - x - floor((y + rr - 1) / P) - 1
end

-- The write (tat_decide): an admitted Allow's new state, to expire when
-- the bucket is full again, or with the caller's time a later w alone.
local write = ok and not peek
if not write and TRACK and now > w then
  write, nat, nfrac = true, at, frac
end
if write then
  local dt = nat - now
  if nfrac > 0 then
    dt = dt + 1
  end
  if dt < 0 then
    dt = 0
  end
  -- Numbers go to Redis as strings made by format('%d'): see tat_decide.
  local ttl = format('%d', floor((dt + 999) / 1000) + PAD)
  if nfrac == 0 and not TRACK then
    call('SET', key, format('%d', nat), 'PX', ttl)
  else
    call('SET', key, format('%d %d %d', nat, nfrac, now), 'PX', ttl)
  end
end

if ok then
  if delay > 0 then
    return {1, rem, reset, NOW, delay}
  end
  return {1, rem, reset, NOW}
end
if STATE then
  -- With TRACK, now is what the key's w is after this call.
  if TRACK then
    return {0, rem, retry, reset, delay, NOW, now, at, frac}
  end
  return {0, rem, retry, reset, delay, NOW, 0, at, frac}
end
return {0, rem, retry, reset, delay, NOW}
