-- usage.lua: Debit, Refund or Reset of one (policy, key), atomically.
--
-- KEYS[1]: the state key; for Reset, KEYS[2] is its block key (see
--   block.lua), deleted with it.
-- ARGV: now (see lib.lua), the operation ('d' Debit, 'r' Refund, 'x'
--   Reset), the algorithm's code, L, P (µs, or calendar window starts;
--   see single.lua), B, the cost (1 to 2^52), and for a refund the
--   instant (µs) of the charge it gives back to, or '' for now; last
--   (for every operation), the channel on which a refund or a reset
--   publishes the key, for other stores' local refusals (refunds.go).
-- Reply: for Debit and Refund, allowed, remaining, retry (µs, 0 when
--   allowed), reset (µs) and 0 (the delay, which a debit never has); for
--   Reset, 1.

local op, code = ARGV[2], ARGV[3]
local channel = ARGV[#ARGV]
if op == 'x' then
  call('DEL', KEYS[1], KEYS[2])
  call('PUBLISH', channel, KEYS[1])
  return {1}
end
local at = tonumber(ARGV[8]) -- nil: now, as the key sees it
local ok, rem, retry, reset = usage(KEYS[1], code, tonumber(ARGV[4]), period(ARGV[5]), tonumber(ARGV[6]), NOW,
  tonumber(ARGV[7]), at, op == 'r')
if op == 'r' then
  call('PUBLISH', channel, KEYS[1])
end
local allowed = 0
if ok then
  allowed = 1
end
return {allowed, rem, retry, reset, 0}
