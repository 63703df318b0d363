-- allow_settle.lua: AllowAll (or Allow) of requests some of which carry
-- an estimate to settle (Request.SettleWithin), decided as many.lua
-- decides them; when all are admitted, the same script writes the lease's
-- settlement, which settle.lua reads back.
--
-- KEYS: the requests' state keys, then the settlement key (in the same
--   hash slot).
-- ARGV: now (see lib.lua), the six fields of each request (see many.lua),
--   then for each request its time to settle in µs, 0 for none.
-- Reply: many.lua's.
--
-- The settlement key holds, in MessagePack, five numbers or strings per
-- estimate: the request's index in the call (from 0), its state key, its
-- cost (the estimate), the decision's time and the first time at which it
-- can no longer be settled (µs). It expires then.

local n = #KEYS - 1
local out = allow_all(0, 1, n)
if out[1] ~= 0 then
  return out
end
for i = 1, n do
  if out[4 + 5 * (i - 1)] ~= 1 then
    return out
  end
end
local rec, last = {}, 0
for i = 1, n do
  local within = tonumber(ARGV[1 + 6 * n + i])
  if within > 0 then
    local expire = ALL_NOW + within
    rec[#rec + 1] = i - 1
    rec[#rec + 1] = KEYS[i]
    rec[#rec + 1] = tonumber(ARGV[1 + 6 * (i - 1) + 5])
    rec[#rec + 1] = ALL_NOW
    rec[#rec + 1] = expire
    if expire > last then
      last = expire
    end
  end
end
if #rec > 0 then
  call('SET', KEYS[n + 1], cmsgpack.pack(rec), 'PX', format('%d', floor((last - ALL_NOW + 999) / 1000) + PAD))
end
return out
