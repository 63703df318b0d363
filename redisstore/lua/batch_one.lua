-- batch_one.lua: several callers' single requests (Allow or Peek) of one
-- algorithm in one script call, each decided as single.lua would decide
-- it, one after the other, at one time. The Go side joins it to the files
-- of that algorithm and sets decide and algorithm, as for single.lua, and
-- MAXDELAY, true for the leaky bucket (the one algorithm that reads a
-- request's maxdelay).
--
-- It is batch.lua's form for the common case, with fewer arguments: each
-- distinct operation and policy is sent once, and every number is read
-- once per script call (tonumber calls strtod, which costs Redis more than
-- a table look-up).
--
-- KEYS: the state key of every request, in order.
-- ARGV: now (see lib.lua); the number of distinct (operation, policy)
--   pairs; per pair its id (any string), L, P (µs), B (see single.lua) and
--   'a' (Allow) or 'p' (Peek); then per request: its pair's id, its cost,
--   and with MAXDELAY its maxdelay.
-- Reply: one reply per request, the one single.lua would give, or an error
--   for a request whose key holds something Sluice did not write there
--   (nothing of that request is charged).

local policies, numbers = {}, {}
local ab = 3
for _ = 1, tonumber(ARGV[2]) do
  policies[ARGV[ab]] = {tonumber(ARGV[ab + 1]), period(ARGV[ab + 2]), tonumber(ARGV[ab + 3]), ARGV[ab + 4] == 'a'}
  ab = ab + 5
end

local width = 2
if MAXDELAY then
  width = 3
end
local replies, n = {}, #ARGV
local k = 0
while ab <= n do
  k = k + 1
  local p = policies[ARGV[ab]]
  local cs = ARGV[ab + 1]
  local cost = numbers[cs]
  if not cost then
    cost = tonumber(cs)
    numbers[cs] = cost
  end
  local maxdelay = -1
  if MAXDELAY then
    local ms = ARGV[ab + 2]
    maxdelay = numbers[ms]
    if not maxdelay then
      maxdelay = tonumber(ms)
      numbers[ms] = maxdelay
    end
  end
  local done, ok, rem, retry, reset, delay, st = pcall(decide, KEYS[k], algorithm, p[1], p[2], p[3], NOW, cost,
    p[4], maxdelay)
  if not done then
    if type(ok) ~= 'table' then
      ok = {err = 'ERR sluice: ' .. tostring(ok)}
    end
    replies[k] = ok
  else
    replies[k] = reply(ok, rem, retry, reset, delay, st)
  end
  ab = ab + width
end
return replies
