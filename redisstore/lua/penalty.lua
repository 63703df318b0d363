-- penalty.lua: Allow, Peek or AllowAll of requests of which some are
-- under policies with a penalty, atomically, as many.lua with the blocks
-- (block.lua): a blocked key refuses the whole, nothing is charged and
-- nobody offends; otherwise a refusal by a penalized policy itself is an
-- offence that blocks its key, once per key in one call.
--
-- KEYS[1..n]: the state keys; KEYS[n+1..2n]: their block keys.
-- ARGV[1]: the time (see lib.lua); then six fields per request, as for
--   many.lua; then the operation ('a' to charge, 'p' for a Peek, which
--   starts no block and charges nothing); then four per request: b, x, m
--   and F of its penalty (µs; b = 0 for a request without one).
-- Reply: the time (µs; see lib.lua), then per request a flag (0, 1
--   refused by a block in force, 2 an offence that started one) and the
--   end of its block (µs, 0 for none), then many.lua's reply.

local n = #KEYS / 2
local pb = 1 + 6 * n
NOCHARGE = ARGV[pb + 1] == 'p'

-- flags and ends hold each request's flag and block end for the reply.
local flags, ends = {}, {}

local function pfield(i, f)
  return tonumber(ARGV[pb + 1 + (i - 1) * 4 + f])
end

PENALTY = function(now, res, all, decide)
  local states, blocked = {}, false
  for i = 1, n do
    if pfield(i, 1) > 0 then
      local u, f, c = block_load(KEYS[n + i])
      states[i] = {u, f, c}
      blocked = blocked or now < u
    end
  end
  local function during(i, u)
    flags[i], ends[i] = flags[i] or 1, u
    local r = res[i]
    local reset0 = 0
    if r[1] then
      local _, _, _, rs = decide(i, now, 0, false, -1)
      reset0 = rs
    end
    res[i] = block_during(u, now, r, reset0)
  end
  if blocked then
    for i = 1, n do
      local st = states[i]
      if st and now < st[1] then
        during(i, st[1])
      end
    end
    return false
  end
  if all or NOCHARGE then
    return all
  end
  local started = {}
  for i = 1, n do
    local st = states[i]
    if st and not res[i][1] then
      local key = KEYS[n + i]
      if not started[key] then
        started[key] = block_offend(key, st[1], st[2], st[3], now, pfield(i, 1), pfield(i, 2), pfield(i, 3), pfield(i, 4))
        flags[i] = 2
      end
      during(i, started[key])
    end
  end
  return false
end

local out = allow_all(0, 1, n)
local r = {NOW}
for i = 1, n do
  r[2 * i], r[2 * i + 1] = flags[i] or 0, ends[i] or 0
end
for i = 1, #out do
  r[2 * n + 1 + i] = out[i]
end
return r
