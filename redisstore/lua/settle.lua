-- settle.lua: Release of a lease that has estimates to settle: its holds
-- freed, as lease.lua frees them, and its settlement (allow_settle.lua)
-- read and deleted in the same script, so that a lease is settled once,
-- by whichever store receives it.
--
-- KEYS: the lease's concurrency keys (nc of them), the state keys of its
--   estimates (ne), then its settlement key; all in one hash slot.
-- ARGV: now (see lib.lua), 'r', the lease id, nc, ne, for each estimate
--   key its algorithm's code, L, P and B (as many.lua takes them), then
--   the number of usage values and the values (each the actual cost of
--   the request of that index, or -1 for none), and last the channel on
--   which a refund publishes its key, for other stores' local refusals
--   (refunds.go).
-- Reply: the units freed, the expired holds dropped at each concurrency
--   key, 1 if the lease still had estimates to settle (0 if it had been
--   settled, or its settlement expired), then for each estimate key the
--   units debited, the units refunded, and the estimates whose time to
--   settle had passed.
--
-- An estimate settled before its time passes: an actual cost above it
-- debits the difference now, one below refunds the difference to the
-- charge made at the decision (debit.lua); no actual cost, or a negative
-- one, keeps the estimate.

local id = ARGV[3]
local nc, ne = tonumber(ARGV[4]), tonumber(ARGV[5])
local base = 5 + 4 * ne
local m = tonumber(ARGV[base + 1])
local skey = KEYS[nc + ne + 1]
local raw = call('GET', skey)
local rec, at_key = {}, {}
if raw then
  rec = cmsgpack.unpack(raw)
  if type(rec) ~= 'table' or #rec % 5 ~= 0 then
    error({err = MALFORMED .. skey})
  end
  -- Every estimate's key must be one the lease names: checked before
  -- anything is written.
  for k = 1, #rec, 5 do
    for x = 1, ne do
      if KEYS[nc + x] == rec[k + 1] then
        at_key[k] = x
      end
    end
    if not at_key[k] then
      return {err = 'ERR sluice: the lease does not name the keys of its estimates'}
    end
  end
  call('DEL', skey)
end
local out = {0}
for i = 1, nc do
  local freed, dropped = conc_release(KEYS[i], id, NOW)
  out[1] = out[1] + freed
  out[1 + i] = dropped
end
local per = {}
for j = 1, ne do
  per[j] = {0, 0, 0}
end
local found = 0
for k = 1, #rec, 5 do
  local idx, est, at, expire, j = rec[k], rec[k + 2], rec[k + 3], rec[k + 4], at_key[k]
  if NOW >= expire then
    per[j][3] = per[j][3] + 1
  else
    found = 1
    local used = -1
    if idx < m then
      used = tonumber(ARGV[base + 2 + idx])
    end
    if used >= 0 and used ~= est then
      local f = 5 + 4 * (j - 1)
      local code, L, P, B = ARGV[f + 1], tonumber(ARGV[f + 2]), period(ARGV[f + 3]), tonumber(ARGV[f + 4])
      if used > est then
        usage(KEYS[nc + j], code, L, P, B, NOW, used - est, nil, false)
        per[j][1] = per[j][1] + used - est
      else
        usage(KEYS[nc + j], code, L, P, B, NOW, est - used, at, true)
        if per[j][2] == 0 then
          call('PUBLISH', ARGV[#ARGV], KEYS[nc + j])
        end
        per[j][2] = per[j][2] + est - used
      end
    end
  end
end
out[#out + 1] = found
for j = 1, ne do
  out[#out + 1] = per[j][1]
  out[#out + 1] = per[j][2]
  out[#out + 1] = per[j][3]
end
return out
