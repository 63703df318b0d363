-- main.lua: one decision over one or more (policy, key) pairs, atomically.
--
-- KEYS: one state key per request.
-- ARGV: now (µs since the Unix epoch, or '' for Redis's TIME), the
--   operation ('a' Allow, 'p' Peek, 'm' AllowAll), the TTL pad in ms, then
--   six fields per request: algorithm (tb, gcra, lb, fw, sw, sl), L, P (µs),
--   B, cost and maxdelay (µs, -1 for none). For the token-bucket family L
--   and P are already divided by their greatest common divisor.
-- Reply: {status, index, then allowed, remaining, retry, reset, delay per
--   request}, all integers, durations in µs. Status 1 means request index
--   costs more than its capacity (retry -1) and nothing was charged; only
--   that request's decision follows.
--
-- An explicit now comes from callers whose clocks need not agree with each
-- other: then every key remembers the latest time it has seen, even when a
-- request changes nothing else, and a time before it counts as that time
-- (no time passing). On Redis's own clock only changed keys record it.

if redis.replicate_commands then
  redis.replicate_commands()
end

local track = ARGV[1] ~= ''
local now
if track then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local op = ARGV[2]
local pad = tonumber(ARGV[3])

local function field(i, f)
  return ARGV[3 + (i - 1) * 6 + f]
end

-- seen returns the latest time the state of request i has seen.
local function seen(i)
  local key, alg = KEYS[i], field(i, 1)
  if alg == 'sl' then
    return log_seen(key)
  elseif alg == 'fw' or alg == 'sw' then
    local _, _, _, w = win_load(key)
    return w
  end
  local _, _, w = tat_load(key)
  return w
end

-- decide runs request i's algorithm at now for cost, stores the new state
-- when commit is set and the request is admitted, and returns allowed,
-- remaining, retry, reset and delay.
local function decide(i, now, cost, commit, maxdelay)
  local key, alg = KEYS[i], field(i, 1)
  local L, P, B = tonumber(field(i, 2)), tonumber(field(i, 3)), tonumber(field(i, 4))
  if alg == 'sl' then
    local ok, rem, retry, reset = sliding_log(key, L, P, now, cost, commit, pad, track)
    return ok, rem, retry, reset, 0
  end
  if alg == 'fw' or alg == 'sw' then
    local start, prev, curr, w = win_load(key)
    if now < w then
      now = w
    end
    local ok, ns, np, nc, expire, rem, retry, reset
    if alg == 'fw' then
      ok, ns, np, nc, expire, rem, retry, reset = fixed_window(L, P, start, curr, now, cost)
    else
      ok, ns, np, nc, expire, rem, retry, reset = sliding_window(L, P, start, prev, curr, now, cost)
    end
    if commit and ok then
      win_save(key, ns, np, nc, now, expire, now, pad)
    elseif track and now > w then
      win_save(key, start, prev, curr, now, expire, now, pad)
    end
    return ok, rem, retry, reset, 0
  end
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
  if commit and ok then
    tat_save(key, nat, nfrac, now, now, pad)
  elseif track and now > w then
    tat_save(key, at, frac, now, now, pad)
  end
  return ok, rem, retry, reset, delay
end

local function bit(ok)
  if ok then
    return 1
  end
  return 0
end

if op ~= 'm' then
  local ok, rem, retry, reset, delay = decide(1, now, tonumber(field(1, 5)), op == 'a', tonumber(field(1, 6)))
  return {0, 1, bit(ok), rem, retry, reset, delay}
end

-- AllowAll: decide every request without charging, a repeated key seeing
-- the cost of the requests before it; then charge all, or none.
local n = #KEYS
if track then
  for i = 1, n do
    now = math.max(now, seen(i))
  end
end
local res, all = {}, true
for i = 1, n do
  local cost = tonumber(field(i, 5))
  for j = 1, i - 1 do
    if KEYS[j] == KEYS[i] then
      cost = cost + tonumber(field(j, 5))
    end
  end
  local ok, rem, retry, reset, delay = decide(i, now, cost, false, tonumber(field(i, 6)))
  if retry == -1 then
    return {1, i, 0, rem, -1, reset, delay}
  end
  all = all and ok
  res[i] = {ok, rem, retry, reset, delay}
end
local out = {0, 0}
for i = 1, n do
  local r = res[i]
  if all then
    -- MaxDelay was checked above, against the summed cost of a repeated
    -- key; charging the second of two must not check it again.
    decide(i, now, tonumber(field(i, 5)), true, -1)
  elseif r[1] then
    -- Not charged: report the state as it stays.
    local _, rem, retry, reset = decide(i, now, 0, false, -1)
    r = {true, rem, retry, reset, 0}
  end
  out[#out + 1] = bit(r[1])
  out[#out + 1] = r[2]
  out[#out + 1] = r[3]
  out[#out + 1] = r[4]
  out[#out + 1] = r[5]
end
return out
