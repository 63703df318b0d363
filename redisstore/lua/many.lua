-- many.lua: AllowAll, one decision over several (policy, key) pairs of any
-- algorithms, atomically: all are charged, or none.
--
-- allow_all(kb, ab, n) decides n requests: request i's state key is
-- KEYS[kb + i] and its six fields follow ARGV[ab]: the algorithm, L, P (µs),
-- B, cost and maxdelay, as for single.lua (for a concurrency request, 'cc',
-- B is the lease id; see concurrency.lua). The AllowAll script calls it on
-- every key, with ARGV[1] the time (see lib.lua); batch.lua calls it on a
-- part of its keys.
-- Reply: status, index, the time (NOW, µs; see lib.lua), then allowed,
--   remaining, retry, reset and delay per request. Status 1 means that
--   request index costs more than its capacity (retry -1): nothing was
--   charged, and only that request's decision follows, then the delay
--   field of each request before it. With STATE (see lib.lua), a denied
--   whole adds, per request, the length of its state and the state
--   (length 0 when it has none to send).
--   A concurrency request's delay field is the number of expired holds
--   dropped at its key (see conc_decide), which the store counts even when
--   nothing is charged.

-- algorithms maps each algorithm's code to the function that decides a
-- request on its state, and the algorithm itself.
local algorithms = {
  tb = {tat_decide, token_bucket},
  gcra = {tat_decide, gcra},
  lb = {tat_decide, leaky_bucket},
  fw = {win_decide, fixed_window},
  sw = {win_decide, sliding_window},
  sl = {sliding_log, false},
  cc = {conc_decide, false},
}

-- barg reads the B field of a request of algorithm code: a number, or for
-- a concurrency request the lease id as it is.
local function barg(code, b)
  if code == 'cc' then
    return b
  end
  return tonumber(b)
end

-- ALL_NOW is the time at which allow_all last decided (see
-- allow_settle.lua).
local ALL_NOW = 0

-- PENALTY, when a script sets it (penalty.lua), is called with the time,
-- the uncharged decisions of the requests and whether all passed, and the
-- function that decides request i again, before anything is charged: it
-- applies the requests' blocks and offences to the decisions, and returns
-- whether all still pass. NOCHARGE makes a call that passes charge
-- nothing (a Peek).
local PENALTY, NOCHARGE = false, false

local function allow_all(kb, ab, n)
  local function field(i, f)
    return ARGV[ab + (i - 1) * 6 + f]
  end

  -- decide runs request i's algorithm at now for cost, charging it if commit
  -- is set and it is admitted.
  local function decide(i, now, cost, commit, maxdelay)
    local code = field(i, 1)
    local a = algorithms[code]
    return a[1](KEYS[kb + i], a[2], tonumber(field(i, 2)), period(field(i, 3)), barg(code, field(i, 4)), now, cost, commit, maxdelay)
  end

  -- seen returns the latest time the state of request i has seen.
  local function seen(i)
    local key, alg = KEYS[kb + i], field(i, 1)
    if alg == 'sl' then
      local w = call('LINDEX', key, 1)
      return tonumber(w or 0) or error({err = MALFORMED .. key})
    elseif alg == 'fw' or alg == 'sw' then
      local _, _, _, w = win_load(key)
      return w
    elseif alg == 'cc' then
      local w = call('HGET', key, 'w')
      return tonumber(w or 0) or error({err = MALFORMED .. key})
    end
    local _, _, w = tat_load(key)
    return w
  end

  local now = NOW
  if TRACK then
    -- One time for every request: the latest any of their keys has seen.
    for i = 1, n do
      local w = seen(i)
      if w > now then
        now = w
      end
    end
  end

  ALL_NOW = now

  -- Decide every request without charging, a repeated key seeing the cost of
  -- the requests before it (summed holds each key's running sum, so the work
  -- grows linearly with the requests); then charge all, or none. A request
  -- of cost 0 is a check: admitted iff a unit is left after the requests
  -- before it on its key (a request of one more unit would be), charging
  -- nothing; its remaining and reset are those of the key as it is, and a
  -- refused check has the retry of that one more unit (algo.Check).
  local res, sts, all, summed = {}, {}, true, {}
  for i = 1, n do
    local key = KEYS[kb + i]
    local own = tonumber(field(i, 5))
    local cost = (summed[key] or 0) + own
    summed[key] = cost
    local md = tonumber(field(i, 6))
    local ok, rem, retry, reset, delay, st = decide(i, now, cost, false, md)
    if own == 0 then
      local ok1, _, retry1, _, _, st1 = decide(i, now, cost + 1, false, md)
      ok, retry = ok1, 0
      if not ok1 then
        retry, st = retry1, st1 or st
      end
      if field(i, 1) ~= 'cc' then
        delay = 0 -- a concurrency request's is its count of dropped holds
      end
    end
    sts[i] = st
    if retry == -1 then
      local r = {1, i, NOW, 0, rem, -1, reset, delay}
      for j = 1, i - 1 do
        r[#r + 1] = res[j][5]
      end
      return r
    end
    all = all and ok
    res[i] = {ok, rem, retry, reset, delay}
  end
  if PENALTY then
    all = PENALTY(now, res, all, decide)
  end
  if STATE and not all then
    -- The states of the requests that pass too, for the store to decide
    -- the whole again: decide returns a state only with a refusal, which a
    -- cost above every capacity (TWO52) always is.
    for i = 1, n do
      if res[i][1] then
        local _, _, _, _, _, st = decide(i, now, TWO52, false, -1)
        sts[i] = st
      end
    end
  end
  local out = {0, 0, NOW}
  for i = 1, n do
    local r = res[i]
    if all then
      -- MaxDelay was checked above, against the summed cost of a repeated
      -- key; charging the second of two must not check it again. A check
      -- charges nothing.
      local own = tonumber(field(i, 5))
      if own > 0 and not NOCHARGE then
        decide(i, now, own, true, -1)
      end
    elseif r[1] then
      -- Not charged: report the state as it stays.
      local _, rem, retry, reset = decide(i, now, 0, false, -1)
      local dropped = 0
      if field(i, 1) == 'cc' then
        dropped = r[5]
      end
      r = {true, rem, retry, reset, dropped}
    end
    local ok = 0
    if r[1] then
      ok = 1
    end
    out[#out + 1] = ok
    out[#out + 1] = r[2]
    out[#out + 1] = r[3]
    out[#out + 1] = r[4]
    out[#out + 1] = r[5]
  end
  if STATE and not all then
    for i = 1, n do
      local st = sts[i] or {}
      out[#out + 1] = #st
      for j = 1, #st do
        out[#out + 1] = st[j]
      end
    end
  end
  return out
end
