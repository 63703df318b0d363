-- single.lua: one request (Allow or Peek) on one key, with one algorithm:
-- the Go side joins the files that algorithm needs and sets decide to its
-- family's function (tat_decide, win_decide or sliding_log) and algorithm
-- to the algorithm's. The token-bucket family has its own, flat,
-- tat_single.lua; the batch scripts take this script's arguments for it
-- too.
--
-- KEYS[1]: the state key.
-- ARGV: now (see lib.lua), 'a' (Allow, which charges an admitted request)
--   or 'p' (Peek), L, P (µs), B, cost, and maxdelay (µs, -1 for none). For
--   the token-bucket family L and P are already divided by their greatest
--   common divisor. (The other scripts take the algorithm's code, tb, gcra,
--   lb, fw, sw or sl, before L; this one is made for one algorithm.)
-- Reply: after an admission 1, remaining, reset (µs) and, when not 0,
--   delay (µs); after a refusal 0, remaining, retry (µs, -1 for never),
--   reset and delay, and with STATE the time and the key's state (see
--   reply in lib.lua).
return reply(decide(KEYS[1], algorithm, tonumber(ARGV[3]), period(ARGV[4]),
  tonumber(ARGV[5]), NOW, tonumber(ARGV[6]), ARGV[2] == 'a', tonumber(ARGV[7])))
