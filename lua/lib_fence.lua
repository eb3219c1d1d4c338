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
local fenceTTL = 86400000
local fenceTTLArg = tostring(fenceTTL) -- as Redis takes it: a string converts for free

-- nextToken(fence, nowUs) returns the token of a fresh grant at server time nowUs (in
-- microseconds), as a decimal string, or nil when the fence key holds a string that is not a
-- token. A fence of another type fails the script here. It writes nothing.
local function nextToken(fence, nowUs)
  local last = redis.call('get', fence)
  if last and not string.match(last, '^%d+$') then
    return nil
  end
  return string.format('%.0f', math.max(tonumber(last or '0') + 1, nowUs))
end

-- setFence records token (from nextToken) as the fence's last, for fenceTTL ms.
local function setFence(fence, token)
  redis.call('set', fence, token, 'px', fenceTTL)
end

-- grantToken(fence) is nextToken and setFence in two calls instead of three (TIME, then a
-- SET ... GET that writes the server's clock and reads the last token in one call): it
-- sets the fence to the token of a fresh grant now and returns that token, a decimal string.
-- A third call rewrites the fence only when its last token was not below the clock (a clock
-- set back, or two grants within a microsecond). When the fence held a string that is not
-- a token, grantToken puts that string back (without the expiry it may have had) and
-- returns nil; a fence of another type fails the script in the SET, which then writes
-- nothing.
local function grantToken(fence)
  local now = redis.call('time')
  local sec, usec = now[1], now[2]
  local nowUs = tonumber(sec) * 1000000 + tonumber(usec)
  -- The decimal digits of nowUs, without formatting a number (cheaper per call).
  local token = sec .. string.rep('0', 6 - #usec) .. usec
  local last = redis.call('set', fence, token, 'px', fenceTTLArg, 'get')
  if last then
    if not string.match(last, '^%d+$') then
      redis.call('set', fence, last)
      return nil
    end
    local n = tonumber(last)
    if n >= nowUs then
      token = string.format('%.0f', n + 1)
      redis.call('set', fence, token, 'px', fenceTTLArg)
    end
  end
  return token
end
