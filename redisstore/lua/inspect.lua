-- inspect.lua: Inspect: the state at one key and the decision Peek would
-- make, read in one call, charging nothing. The Go side joins the files of
-- the key's algorithm and sets decide and algorithm, as for single.lua.
--
-- KEYS[1]: the state key.
-- ARGV (text, unlike single.lua's one packed argument): now (see
--   lib.lua), the operation (ignored: nothing is charged), the algorithm's
--   code (tb, gcra, lb, fw, sw, sl or cc), L, P (µs), B (unused by cc),
--   cost, and maxdelay (µs, -1 for none).
-- Reply: now (µs, never before the latest time the key has seen), then
--   allowed, remaining, retry, reset and delay as single.lua's, then the
--   state as stored:
--   the token-bucket family: at as h and l (at = h·10^8 + l, exact past
--   2^53; see big.lua) and frac (in 1/L µs of the divided L);
--   the windows: start, prev and curr;
--   the sliding log: the entries that count at now, their summed cost,
--   and the times of the oldest and newest of them;
--   concurrency: the units held at now, the number of holds that hold
--   them, and the latest of their expiries (0 for none).
-- With Redis's clock nothing is written, not even the drop of expired
-- holds. With the caller's time, the peek records the time as the latest
-- seen, as Peek does.
local key, code = KEYS[1], ARGV[3]
local L, P, B = tonumber(ARGV[4]), period(ARGV[5]), tonumber(ARGV[6])
local now = NOW
local state, hs
if code == 'sl' then
  local head = call('LRANGE', key, 0, 1)
  local sum, w = 0, 0
  if #head == 2 then
    sum, w = tonumber(head[1]), tonumber(head[2])
    if not sum or not w then
      error({err = MALFORMED .. key})
    end
  end
  if now < w then
    now = w
  end
  local n = 0
  if #head == 2 then
    n = (call('LLEN', key) - 2) / 2
  end
  local entries, oldest, newest = 0, 0, 0
  if n > 0 then
    local tail = call('LRANGE', key, -2, -1)
    newest = tonumber(tail[1])
    if not newest then
      error({err = MALFORMED .. key})
    end
    if now < newest then
      now = newest
    end
    -- Skip the entries that no longer count, oldest first.
    local first, done = 0, false
    while not done and first < n do
      local c = call('LRANGE', key, 2 + 2 * first, 1 + 2 * (first + 32))
      local k = 1
      while k < #c do
        local at = tonumber(c[k])
        if now - at < P then
          oldest, done = at, true
          break
        end
        sum = sum - tonumber(c[k + 1])
        first, k = first + 1, k + 2
      end
      if #c < 2 then
        break
      end
    end
    entries = n - first
    if entries == 0 then
      newest = 0
    end
  end
  state = {entries, sum, oldest, newest}
elseif code == 'fw' or code == 'sw' then
  local start, prev, curr, w = win_load(key)
  if now < w then
    now = w
  end
  state = {start, prev, curr}
elseif code == 'cc' then
  local h, _, _, t = conc_read(key, now)
  hs, now = h, t
  local held, last = conc_last(hs)
  state = {held, #hs, last}
else
  local at, frac, w = tat_load(key)
  if now < w then
    now = w
  end
  local ah, al = tat_at(at)
  state = {ah, al, frac}
end
-- peek decides a request of cost units on the state, charging nothing.
local function peek(cost)
  if code == 'cc' and not TRACK then
    -- conc_decide would drop the expired holds.
    local ok, rem, retry, reset = conc_judge(hs, L, P, '', now, cost, false, {})
    return ok, rem, retry, reset, 0
  end
  -- For a concurrency key (times tracked), delay is the number of
  -- expired holds conc_decide dropped, which the store counts.
  return decide(key, algorithm, L, P, B, NOW, cost, false, tonumber(ARGV[8]))
end
local cost = tonumber(ARGV[7])
local ok, rem, retry, reset, delay = peek(cost)
if cost == 0 then
  -- A check: is a unit left (see many.lua).
  local ok1, _, retry1 = peek(1)
  ok, retry = ok1, 0
  if not ok1 then
    retry = retry1
  end
  if code ~= 'cc' then
    delay = 0
  end
end
local out = {now, 0, rem, retry, reset, delay}
if ok then
  out[2] = 1
end
for i = 1, #state do
  out[#out + 1] = state[i]
end
return out
