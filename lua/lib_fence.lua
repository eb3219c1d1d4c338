-- lib_fence: not a script; included ("--#include lib_fence") by the scripts that grant a lock
-- afresh (acquire, fair_acquire, rw_acquire, and release when it passes the lock on).
-- The fence is a string key holding the last fencing token of a name, a decimal integer. It
-- lives fenceTTL ms after the last fresh grant (lua.FenceTTL, 24 hours), so that a name locked
-- once does not keep a key forever. Tokens do not depend on it alone: a fresh grant's token is
-- the larger of the last token + 1 and the server's clock in microseconds, so after the fence
-- expired (or was lost with a restart or failover) tokens still rise as long as the server's
-- clock reads later than at the name's last grant.
-- The current holder's token is kept in the lock hash itself (field 'token'), not read back
-- from the fence, so that a re-entry or a replay answers it even if the fence is gone.
--
-- Spent request ids. An acquire's first send that the caller gave up on may still reach
-- Redis after its replay (rueidis spreads a client's commands over several connections, so
-- nothing orders the two): had the replay's grant been given back by then, the first send
-- would take the lock afresh for a caller that has gone (a ghost hold, until its lease
-- ends). So a replay (its request id sent as '+' .. id, see spentMark) spends its id: the
-- fence keeps it after the token, as '/' .. id .. '/' .. until (server ms), for spentKeep ms
-- or the request's lease if longer, and no acquire grants (nor queues, nor claims) under a
-- spent id. Fresh grants read the fence anyway, so a lock that no replay touched pays
-- nothing; while a record may live, the lock hash carries the field g (spentFlag), which
-- tells re-entries to read the fence too. A fence keeps at most spentMax records, the newest.
local fenceTTL = 86400000
local fenceTTLArg = tostring(fenceTTL) -- as Redis takes it: a string converts for free
local spentKeep = 60000
local spentMax = 32
local spentMark = 43 -- '+': the byte that starts a replay's request id
local spentFlag = 'g'

-- splitFence(v) returns the token of fence value v and its spent records (the rest of v,
-- '' when none), or nil when v is not a fence value.
local function splitFence(v)
  local tok, rest = string.match(v, '^(%d+)(.*)$')
  if tok and (rest == '' or string.gsub(rest, '/[^/]+/%d+', '') == '') then
    return tok, rest
  end
  return nil
end

-- liveSpent(rest, nowMs, req, room) returns the records of rest still live at nowMs (at most
-- spentMax - room of them, the newest), and whether req is among them.
local function liveSpent(rest, nowMs, req, room)
  local out, spent = {}, false
  for id, at in string.gmatch(rest, '/([^/]+)/(%d+)') do
    if tonumber(at) > nowMs then
      out[#out + 1] = '/' .. id .. '/' .. at
      if id == req then
        spent = true
      end
    end
  end
  return table.concat(out, '', math.max(1, #out - spentMax + room + 1)), spent
end

-- spentRecord is the record of request id req spent until server time untilMs.
local function spentRecord(req, untilMs)
  return '/' .. req .. '/' .. string.format('%.0f', untilMs)
end

-- replayOf(req) returns the request id that ARGV req names, and whether it is a replay's.
local function replayOf(req)
  if string.byte(req) == spentMark then
    return string.sub(req, 2), true
  end
  return req, false
end

-- serverMs is the server's clock in milliseconds.
local function serverMs()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fenceSpent(fence, req, nowMs) returns whether the fence records req as spent at nowMs, and
-- whether it holds any live record. A fence that is absent, of another type or not a fence
-- value records nothing.
local function fenceSpent(fence, req, nowMs)
  local v = redis.pcall('get', fence)
  if type(v) ~= 'string' then
    return false, false
  end
  local tok, rest = splitFence(v)
  if not tok or rest == '' then
    return false, false
  end
  local live, spent = liveSpent(rest, nowMs, req, 0)
  return spent, live ~= ''
end

-- spend records req as spent in the fence until nowMs + keep, and flags the lock hash (when
-- it exists) so that its re-entries read the fence. It is a best effort that never fails the
-- script: a fence of another type, or one that is not a fence value, is left alone, and a
-- refused write (a full server, an ACL) keeps no record.
local function spend(lock, fence, req, nowMs, keep)
  local v = redis.pcall('get', fence)
  if type(v) == 'table' then
    return
  end
  local tok, rest = '0', ''
  if v then
    tok, rest = splitFence(v)
    if not tok then
      return
    end
  end
  local live = liveSpent(rest, nowMs, req, 1)
  redis.pcall('set', fence, tok .. live .. spentRecord(req, nowMs + keep), 'px', fenceTTLArg)
  if redis.call('exists', lock) == 1 then
    redis.pcall('hset', lock, spentFlag, '1')
  end
end

-- nextToken(fence, nowUs, req, room) returns the token of a fresh grant at server time nowUs
-- (in microseconds), as a decimal string, and the fence's live spent records (to keep: see
-- setFence; room fewer than spentMax at most, for the caller's own) and whether req is among
-- them; or nil when the fence key holds a string that is not a fence value. A fence of
-- another type fails the script here. It writes nothing.
local function nextToken(fence, nowUs, req, room)
  local last = redis.call('get', fence)
  local tail, spent = '', false
  if last and not string.match(last, '^%d+$') then
    local rest
    last, rest = splitFence(last)
    if not last then
      return nil
    end
    tail, spent = liveSpent(rest, math.floor(nowUs / 1000), req, room)
  end
  return string.format('%.0f', math.max(tonumber(last or '0') + 1, nowUs)), tail, spent
end

-- setFence records token (from nextToken) as the fence's last, for fenceTTL ms, followed by
-- the spent records tail (from nextToken, with any record the caller adds; nil: none).
local function setFence(fence, token, tail)
  redis.call('set', fence, token .. (tail or ''), 'px', fenceTTL)
end

-- grantToken(fence, req, keep) is nextToken and setFence in two calls instead of three (TIME,
-- then a SET ... GET that writes the server's clock and reads the last token in one call): it
-- sets the fence to the token of a fresh grant now and returns that token, a decimal string,
-- and whether the fence holds live spent records after it (the lock hash then gets the field
-- g). A third call rewrites the fence only when its last token was not below the clock (a
-- clock set back, or two grants within a microsecond), or when it holds spent records (kept),
-- or when keep is given: then req (a replay's request id) is spent for keep ms. When req
-- (nil: not checked) is spent, grantToken puts the fence back and returns false: no grant.
-- When the fence held a string that is not a fence value, grantToken puts that string back
-- (without the expiry it may have had) and returns nil; a fence of another type fails the
-- script in the SET, which then writes nothing.
local function grantToken(fence, req, keep)
  local now = redis.call('time')
  local sec, usec = now[1], now[2]
  local nowUs = tonumber(sec) * 1000000 + tonumber(usec)
  -- The decimal digits of nowUs, without formatting a number (cheaper per call).
  local token = sec .. string.rep('0', 6 - #usec) .. usec
  local last = redis.call('set', fence, token, 'px', fenceTTLArg, 'get')
  local tail, rewrite = '', false
  if last then
    if not string.match(last, '^%d+$') then
      local tok, rest = splitFence(last)
      if not tok then
        redis.call('set', fence, last)
        return nil
      end
      local spent
      tail, spent = liveSpent(rest, math.floor(nowUs / 1000), req, keep and 1 or 0)
      if spent then
        redis.call('set', fence, last, 'px', fenceTTLArg)
        return false
      end
      last, rewrite = tok, tail ~= ''
    end
    local n = tonumber(last)
    if n >= nowUs then
      token = string.format('%.0f', n + 1)
      rewrite = true
    end
  end
  if keep then
    tail = tail .. spentRecord(req, math.floor(nowUs / 1000) + keep)
    rewrite = true
  end
  if rewrite then
    redis.call('set', fence, token .. tail, 'px', fenceTTLArg)
  end
  return token, tail ~= ''
end
