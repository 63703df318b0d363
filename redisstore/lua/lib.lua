-- lib.lua: what every algorithm shares: the call's time, the reply, and
-- (with muldivmod.lua, joined before it) exact integer arithmetic on Lua's
-- numbers.
--
-- Lua numbers are IEEE doubles, exact for integers up to 2^53. Every value
-- the scripts compute is such an integer: times are microseconds below 2^52
-- (until the year 2112), limits and bursts at most 10^9 (below 2^30), periods
-- at most ten years (below 2^49 µs), and refill times at most 2^52 µs. The
-- Go side refuses the policies and times that would leave those ranges.
-- Products that can exceed 2^52, such as prev·(P−x) of the sliding window or
-- backlog·L of the token bucket, go through muldivmod, which splits them.
--
-- ARG_NOW, which the Go side declares before this file (ARGV[1], or in
-- single.lua the time unpacked from its packed argument), is now in µs
-- since the Unix epoch, or '' (nil when packed) for Redis's own TIME.
-- An explicit now comes from callers whose clocks need not agree with each
-- other (tests, simulations): then every key remembers the latest time it
-- has seen (w), even when a request changes nothing else, and a time before
-- it counts as that time, no time passing. On Redis's clock nothing is
-- written for a request that changes nothing.

if redis.replicate_commands then
  redis.replicate_commands() -- Redis < 7: replicate the effects, not the script
end

local tonumber, format, match, call = tonumber, string.format, string.match, redis.call

local TRACK = ARG_NOW ~= nil and ARG_NOW ~= ''
local NOW
if TRACK then
  NOW = tonumber(ARG_NOW)
else
  local t = call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- PAD is added to every TTL, in milliseconds: 1 because Redis counts a
-- key's expiry on a millisecond clock that may lag the microsecond one, and
-- with the caller's time, which need not advance with Redis's clock, an
-- hour more, so that keys outlast the real time between a test's calls. A
-- key whose state is back to initial dt µs from now lives
-- ceil(dt/1000) + PAD ms.
local PAD = 1
if TRACK then
  PAD = 3600001
end

-- MALFORMED starts the error a script stops with when a key holds
-- something Sluice did not write there.
local MALFORMED = 'ERR sluice: malformed state at key '

-- STATE, which the Go side declares before every script, makes every
-- refusal carry the key's state, for the store's local refusals (see
-- refusals.go): the decide functions then return, after a refusal's five
-- numbers, a table st = {w, state...}, where w is the latest time the key
-- has seen when times are tracked (else 0), and the state is at, frac
-- (token-bucket family), start, prev, curr (windows) or the log's (at,
-- cost) pairs.

-- reply returns one decision as single.lua replies it: after an
-- admission 1, remaining, reset, NOW and, when not 0, delay; after a
-- refusal 0, remaining, retry, reset, delay and NOW, and with a state st,
-- st.
local function reply(ok, rem, retry, reset, delay, st)
  if ok then
    if delay > 0 then
      return {1, rem, reset, NOW, delay}
    end
    return {1, rem, reset, NOW}
  end
  local r = {0, rem, retry, reset, delay, NOW}
  if st then
    for i = 1, #st do
      r[6 + i] = st[i]
    end
  end
  return r
end

-- period reads the P argument of a window algorithm: a number of µs, or
-- for calendar windows six consecutive window starts in µs joined by
-- commas, which the Go side computes around its own clock (see
-- window_bounds in window.lua).
local function period(s)
  local n = tonumber(s)
  if n then
    return n
  end
  local b = {}
  for v in string.gmatch(s, '%d+') do
    b[#b + 1] = tonumber(v)
  end
  return b
end
