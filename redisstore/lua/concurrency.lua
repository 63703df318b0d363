-- concurrency.lua: at most L units held at once per key, each admitted
-- request holding its cost until its lease is released or expires.
--
-- Mirrors internal/algo/concurrency.go. A concurrency key is a Redis hash:
-- one field per lease id (22 characters of base64url, from the Go side)
-- whose value is "units expiry lease" (µs: the hold counts at t iff t <
-- expiry; lease is the length a renewal adds again), and, when times are
-- tracked, the field w with the latest time the key has seen. Holds that
-- no longer count are dropped whenever the key is read for a decision, a
-- release, a renewal or the held scan (held.lua), and the scripts report
-- how many they dropped, for the store's count of expired holds. A key
-- that still holds anything expires LINGER ms after its last hold (plus
-- PAD, see lib.lua): its holds have then all run out unreleased, and the
-- key stays for a script (the held scan at the latest) to find and count
-- them; a key left with no hold is deleted.

-- LINGER is how long, in ms, a concurrency key outlives its last hold.
local LINGER = 120000

-- conc_read returns the holds at key that count at now, each {id, units,
-- expiry, lease}; the ids of the holds that no longer count; w (0 when
-- times are not tracked or the key has none); and now, never before w.
local function conc_read(key, now)
  local kv = call('HGETALL', key)
  local all, w = {}, 0
  for i = 1, #kv, 2 do
    local f, v = kv[i], kv[i + 1]
    if f == 'w' then
      w = tonumber(v)
      if not w then
        error({err = MALFORMED .. key})
      end
    else
      local u, e, l = match(v, '^(%d+) (%d+) (%d+)$')
      if not u then
        error({err = MALFORMED .. key})
      end
      all[#all + 1] = {f, tonumber(u), tonumber(e), tonumber(l)}
    end
  end
  if now < w then
    now = w
  end
  local hs, gone = {}, {}
  for i = 1, #all do
    local h = all[i]
    if h[3] > now then
      hs[#hs + 1] = h
    else
      gone[#gone + 1] = h[1]
    end
  end
  return hs, gone, w, now
end

-- conc_last returns the units held by hs and their latest expiry (0 for
-- none).
local function conc_last(hs)
  local held, last = 0, 0
  for i = 1, #hs do
    held = held + hs[i][2]
    if hs[i][3] > last then
      last = hs[i][3]
    end
  end
  return held, last
end

-- conc_write stores the key's holds at now: it deletes the fields of gone,
-- writes the holds of hs whose id set holds, and w when times are tracked,
-- and sets the key to expire with its last hold. A key left with no hold
-- is deleted (kept PAD ms for w when times are tracked); any other stays
-- LINGER ms after its last hold.
local function conc_write(key, hs, gone, set, now)
  for i = 1, #gone, 64 do
    call('HDEL', key, unpack(gone, i, math.min(i + 63, #gone)))
  end
  for i = 1, #hs do
    local h = hs[i]
    if set[h[1]] then
      call('HSET', key, h[1], format('%d %d %d', h[2], h[3], h[4]))
    end
  end
  if #hs == 0 and not TRACK then
    call('DEL', key)
    return
  end
  if TRACK then
    call('HSET', key, 'w', format('%d', now))
  end
  local _, last = conc_last(hs)
  local dt = last - now
  if dt < 0 then
    dt = 0
  end
  local linger = 0
  if #hs > 0 then
    linger = LINGER
  end
  call('PEXPIRE', key, format('%d', floor((dt + 999) / 1000) + PAD + linger))
end

-- conc_judge decides a request of cost units at t on the holds hs that
-- count at t (as conc_read returns them), under at most L units held at
-- once, and returns allowed, remaining, retry (µs, -1 for never) and reset
-- (µs). With commit an admitted request's hold of cost units, named id and
-- expiring P µs after t, is added to hs and id to set; a second hold of
-- the same id (AllowAll's repeated key) adds its units to the first. A
-- cost of 0 asks for the state. It reads and writes nothing in Redis.
local function conc_judge(hs, L, P, id, t, cost, commit, set)
  local held, last = conc_last(hs)
  local ok, rem, retry, reset
  if cost > L then
    rem = L - held
    if rem < 0 then
      rem = 0
    end
    reset = last - t
    if reset < 0 then
      reset = 0
    end
    ok, retry = false, -1
  elseif held + cost <= L then
    local expiry = last
    if cost > 0 then
      if t + P > expiry then
        expiry = t + P
      end
      if commit then
        local found = false
        for i = 1, #hs do
          if hs[i][1] == id then
            hs[i][2], hs[i][3], hs[i][4] = hs[i][2] + cost, t + P, P
            found = true
          end
        end
        if not found then
          hs[#hs + 1] = {id, cost, t + P, P}
        end
        set[id] = true
      end
    end
    reset = expiry - t
    if reset < 0 then
      reset = 0
    end
    ok, rem, retry = true, L - held - cost, 0
  else
    -- The first time at which holds of held + cost − L units will have
    -- expired, taking them in order of expiry.
    local need, byexp = held + cost - L, {}
    for i = 1, #hs do
      byexp[i] = hs[i]
    end
    table.sort(byexp, function(a, b) return a[3] < b[3] end)
    local freed, at = 0, t
    for i = 1, #byexp do
      if freed >= need then
        break
      end
      freed, at = freed + byexp[i][2], byexp[i][3]
    end
    rem = L - held
    if rem < 0 then
      rem = 0
    end
    ok, retry, reset = false, at - t, last - t
  end
  return ok, rem, retry, reset
end

-- conc_decide decides a request of cost units at now on the holds at key
-- (algorithm and maxdelay are unused: it has the signature of tat_decide),
-- as conc_judge does with id B's place in the arguments, and returns
-- allowed, remaining, retry, reset and, in the place of the delay (a
-- concurrency decision never delays), the number of expired holds it
-- dropped, writing what changed. It returns no state for local refusals:
-- a release can admit at any moment what a refusal refused.
local function conc_decide(key, algorithm, L, P, id, now, cost, commit, maxdelay)
  local hs, gone, w, t = conc_read(key, now)
  local set = {}
  local ok, rem, retry, reset = conc_judge(hs, L, P, id, t, cost, commit, set)
  if #gone > 0 or next(set) or (TRACK and t > w) then
    conc_write(key, hs, gone, set, t)
  end
  return ok, rem, retry, reset, #gone, nil
end

-- conc_release drops the hold of id at key and returns the units it held
-- if it still counted at now (0 if it expired, was released, or never
-- was), and the number of expired holds it dropped.
local function conc_release(key, id, now)
  local hs, gone, w, t = conc_read(key, now)
  local dropped, freed, keep = #gone, 0, {}
  for i = 1, #hs do
    if hs[i][1] == id then
      freed = hs[i][2]
      gone[#gone + 1] = id
    else
      keep[#keep + 1] = hs[i]
    end
  end
  if #gone > 0 or (TRACK and t > w) then
    conc_write(key, keep, gone, {}, t)
  end
  return freed, dropped
end

-- conc_renew moves the expiry of the hold of id at key, if it still counts
-- at now, to its lease after now, and returns the time until then in µs,
-- or -1 when there is no such hold, and the number of expired holds it
-- dropped.
local function conc_renew(key, id, now)
  local hs, gone, w, t = conc_read(key, now)
  local set, left = {}, -1
  for i = 1, #hs do
    local h = hs[i]
    if h[1] == id then
      h[3] = t + h[4]
      set[id] = true
      left = h[4]
    end
  end
  if #gone > 0 or next(set) or (TRACK and t > w) then
    conc_write(key, hs, gone, set, t)
  end
  return left, #gone
end

-- conc_sweep drops the expired holds at key and returns the units held at
-- now, the number of holds (leases) that hold them, and the number of
-- expired holds it dropped.
local function conc_sweep(key, now)
  local hs, gone, w, t = conc_read(key, now)
  if #gone > 0 or (TRACK and t > w) then
    conc_write(key, hs, gone, {}, t)
  end
  local held = conc_last(hs)
  return held, #hs, #gone
end
