-- block.lua: the penalty state of a (policy, key), as internal/algo's
-- Block and Penalty: the end of its block u, the instant its offences are
-- forgotten f and their count n, kept as the text 'u:f:n' under the state
-- key's name with '#b' appended (the same hash slot), expiring at f.

-- MAX_OFFENCES is algo.MaxOffences.
local MAX_OFFENCES = 1073741824

-- block_load returns u, f and n of key, or 0, 0, 0 when it has none.
local function block_load(key)
  local v = call('GET', key)
  if not v then
    return 0, 0, 0
  end
  local u, f, n = match(v, '^(%d+):(%d+):(%d+)$')
  if not u then
    error({err = MALFORMED .. key})
  end
  return tonumber(u), tonumber(f), tonumber(n)
end

-- block_length returns the block of the n-th offence: b·x^(n−1), at most
-- m, multiplying at most while below m, each product checked against
-- floor(m/x) computed exactly (every product here is below 2^53).
local function block_length(b, x, m, n)
  local d = b
  if x > 1 then
    local q = math.floor(m / x)
    while q * x > m do
      q = q - 1
    end
    while (q + 1) * x <= m do
      q = q + 1
    end
    local i = 1
    while i < n and d < m do
      if d > q then
        return m
      end
      d = d * x
      i = i + 1
    end
  end
  if d > m then
    d = m
  end
  return d
end

-- block_offend records an offence at now on key, whose state is u, f and
-- n, under the penalty b, x, m, F (µs), and returns the new u.
local function block_offend(key, u, f, n, now, b, x, m, F)
  local c = 1
  if now < f then
    c = math.min(n + 1, MAX_OFFENCES)
  end
  local nu = now + block_length(b, x, m, c)
  local nf = nu + F
  call('SET', key, format('%d:%d:%d', nu, nf, c), 'PX', math.floor((nf - now + 999) / 1000) + PAD)
  return nu
end

-- block_during returns the decision on a request refused by a block that
-- ends at u, at now, given r, the policy's own uncharged decision on it
-- ({ok, rem, retry, reset, delay}), and reset0, the reset of the state as
-- it is: refused, the later of the block's end and r's retry, the later of
-- the block's end and the state's reset (algo's Block.During).
local function block_during(u, now, r, reset0)
  local left = u - now
  local retry, reset = left, r[4]
  if r[1] then
    reset = reset0
  elseif r[3] > retry then
    retry = r[3]
  end
  if reset < left then
    reset = left
  end
  return {false, 0, retry, reset, 0}
end
