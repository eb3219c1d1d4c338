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
--#include lib_clock
local counterTTL = 1000
local counterTTLArg = tostring(counterTTL)

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
  local live, spent = liveSpent(rest, nowMs, req, 1)
  -- Recorded already (a replay refused again): another record of it would push out, of the
  -- newest spentMax kept, a live record of another request, whose late first send would then
  -- grant afresh (spent_test: refusedReplaysDoNotEvictOthersRecords).
  if not spent then
    redis.pcall('set', fence, tok .. live .. spentRecord(req, nowMs + keep), 'px', fenceTTLArg)
  end
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

-- grantToken(fence, n, req, keep, clock) completes the token of a fresh grant on the paths
-- its caller does not take inline. The caller sent INCR to the fence (redis.pcall) and got n,
-- unless clock is set (then n is nil and nothing was sent: the token follows the server's
-- clock, for RedLock's instances). While the counter lives (n > 2^40: seeded from the clock) its INCR is the token, and
-- grantToken runs only for a replay (keep given: req is spent for keep ms, so that its first
-- send, reaching Redis later, grants nothing). Otherwise (the fence was missing, INCR made it
-- 1, or a fast grant's INCR made it, a small count without an expiry; it holds spent records after its token, so INCR refused it; or clock) the token is
-- max(last token + 1, the server's clock in microseconds), and the fence is written: for
-- counterTTL ms when it holds only the token and clock is not set (the counter then counts up
-- by INCR from a clock reading at most counterTTL old), for fenceTTL ms otherwise. It returns
-- the token (a decimal string) and whether the fence holds live spent records after it;
-- false, with nothing written, when req is spent; nil, with nothing written, when the fence
-- holds a string that is not a fence value. A fence of another type (or an INCR refused)
-- fails the script with INCR's error, nothing written.
-- So tokens rise by one per grant for at most counterTTL ms, then follow the clock again:
-- they keep rising when the fence expired or was lost (a restart, a failover), since no name
-- is granted more than once a microsecond, unless the server's clock was set back; and a
-- token is the server's clock at its grant to within counterTTL (rlock.HolderInfo.Since).
local function grantToken(fence, n, req, keep, clock)
  local token, tail, nowMs, ttl = nil, '', nil, nil
  -- A counter at or below 2^40 was not seeded from the clock: the caller's INCR made it (1),
  -- or a fast grant's (lib_fast.lua), without an expiry; it is seeded here like a missing
  -- one, and a refusal (an ACL without TIME or SET) deletes it, so that no fence is left
  -- without an expiry.
  local unseeded = type(n) == 'number' and n <= 1099511627776
  local function unseed() if unseeded then redis.call('del', fence) end end
  if type(n) == 'number' and not unseeded and not clock then
    token = string.format('%.0f', n)
  else
    if type(n) == 'table' and not string.find(n.err, 'not an integer', 1, true) then
      redis.call('incr', fence) -- fails again, here: another type (WRONGTYPE) or a refusal
    end
    local now = redis.pcall('time') if type(now) == 'table' and now.err then unseed() error(now) end
    local nowUs = tonumber(now[1]) * 1000000 + tonumber(now[2])
    nowMs = math.floor(nowUs / 1000)
    local last = 0
    if n ~= 1 then
      local v = redis.call('get', fence)
      if v then
        local tok, rest = splitFence(v)
        if not tok then
          return nil
        end
        local spent
        tail, spent = liveSpent(rest, nowMs, req, keep and 1 or 0)
        if spent then
          return false
        end
        last = tonumber(tok)
      end
    end
    token = clockToken(last, now)
    ttl = (tail == '' and not clock) and counterTTLArg or fenceTTLArg
  end
  if keep then
    tail = tail .. spentRecord(req, (nowMs or serverMs()) + keep)
    ttl = fenceTTLArg
  end
  if ttl then
    local r = redis.pcall('set', fence, token .. tail, 'px', ttl) if type(r) == 'table' and r.err then unseed() error(r) end
  end
  return token, tail ~= ''
end
