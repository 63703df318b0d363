-- batch.lua: several callers' calls in one script call, each decided as
-- its own script would decide it, one after the other, at one time.
--
-- The store sends a batch when its callers outnumber the script calls it
-- keeps in flight (see batch.go): the calls that wait meanwhile go together,
-- which saves Redis the work of one command, one script run and one TIME
-- per call. Each call is atomic on its own, as it would be alone, and the
-- calls of a batch are decided in the order they are listed.
--
-- KEYS: the state keys of every call, in order.
-- ARGV: now (see lib.lua), then per call: its operation ('a' Allow or 'p'
--   Peek of one request, 'm' AllowAll), its number of requests n, and the
--   six fields of each request (algorithm, L, P, B, cost, maxdelay; see
--   single.lua).
-- Reply: one reply per call, the one single.lua or many.lua would give, or
--   an error for a call whose key holds something Sluice did not write
--   there (nothing of that call is charged).

-- one decides a single Allow or Peek: the request at KEYS[kb + 1] whose
-- fields follow ARGV[ab].
local function one(kb, ab, commit)
  local code = ARGV[ab + 1]
  local a = algorithms[code]
  return reply(a[1](KEYS[kb + 1], a[2], tonumber(ARGV[ab + 2]), period(ARGV[ab + 3]),
    barg(code, ARGV[ab + 4]), NOW, tonumber(ARGV[ab + 5]), commit, tonumber(ARGV[ab + 6])))
end

local replies = {}
local kb, ab = 0, 2
while ab <= #ARGV do
  local op, n = ARGV[ab], tonumber(ARGV[ab + 1])
  local done, reply
  if op == 'm' then
    done, reply = pcall(allow_all, kb, ab + 1, n)
  else
    done, reply = pcall(one, kb, ab + 1, op == 'a')
  end
  if not done then
    if type(reply) ~= 'table' then
      reply = {err = 'ERR sluice: ' .. tostring(reply)}
    end
  end
  replies[#replies + 1] = reply
  kb, ab = kb + n, ab + 2 + 6 * n
end
return replies
