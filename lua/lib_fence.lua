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
-- The fence also keeps a lock's spent request ids (lib_spent.lua), after the token: no
-- acquire grants (nor queues, nor claims) under a spent id. Fresh grants read the fence
-- anyway, so a lock that no replay touched pays nothing; while a record may live, the lock
-- hash carries the field g (spentFlag), which tells re-entries to read the fence too.
local fenceTTL = 86400000
local fenceTTLArg = tostring(fenceTTL) -- as Redis takes it: a string converts for free

-- splitFence(v) returns the token of fence value v and its spent records (the rest of v,
-- '' when none), or nil when v is not a fence value.
local function splitFence(v)
  local tok, rest = string.match(v, '^(%d+)(.*)$')
  if tok and (rest == '' or string.gsub(rest, '/[^/]+/%d+', '') == '') then
    return tok, rest
  end
  return nil
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
