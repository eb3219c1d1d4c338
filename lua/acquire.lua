-- acquire: take or re-enter a reentrant lock.
-- KEYS[1] = lock hash: field <owner> = hold count, q:<owner> = last request id applied for that
--           owner, token = the fencing token of the current holder's grant, w = present once
--           a waiter was refused during this tenure (its release publishes), g = present
--           while the fence may record spent request ids (re-entries then read it). Owner
--           ids start with 'h:' or 'u:' (see rlock), so no owner id can name another field.
-- KEYS[2] = fence (string: the name's last fencing token, a decimal integer, then for a while
--           the spent request ids); it lives 24 hours after the last fresh grant (see
--           lib_fence.lua and lua.FenceTTL)
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[2] = owner id
-- ARGV[3] = request id (unique per call; a replay with the same id is answered, not applied again);
--           a replay (a send after the first) sends it as '+' .. id: the id is then spent
--           (lib_spent.lua, lib_fence.lua), whether the replay was granted or refused, and
--           a later send of it (the first, reaching Redis last) grants nothing: where it
--           would take or re-enter the lock it is refused with {0, 0}, writing nothing
-- ARGV[4] = (optional) '1' when the caller, if refused, waits on the release channel: the
--           refusal then marks the lock (field w) so that its release publishes (release.lua);
--           '2' when the caller has been waiting already: a grant marks the lock too (other
--           waiters may still wait: the release must tell them). Without a mark, a release
--           publishes nothing: nobody waits. On a full server (noeviction), where the mark
--           cannot be written, a refusal answers a pttl of at most 50 ms: the waiter polls.
-- returns {1, token, holds}  acquired (fresh, re-entered, or a replay of an applied request)
--         {0, pttl}          held by another owner; pttl is the lock's remaining lease (-1: no expiry)
--         a WRONGTYPE error, with nothing written, when the lock or the fence holds another type
--         (or the fence a string that is not a token: it is put back, without its expiry)
-- A fresh grant's token is the larger of the fence's last token + 1 and the server's clock in
-- microseconds, so tokens keep rising when the fence expired or was lost (a restart without
-- persistence, a failover to a replica that lacked it), unless the server's clock was set
-- back by more than the time since the fence was last written.
-- An uncontended grant costs six server calls, this script's included (EVALSHA, EXISTS, TIME,
-- SET, HSET, PEXPIRE); the release after it three (release.lua). Spent ids cost a first send
-- nothing more unless the fence records some (a replay on this name within a minute or so).
--#include lib_spent
--#include lib_fence
--#include lib_refusal
local lock, fence = KEYS[1], KEYS[2]
local lease, owner = ARGV[1], ARGV[2]
local req, replay = replayOf(ARGV[3])
local reqField = 'q:' .. owner
local markRetry = 50 -- ms: how soon a waiter whose mark could not be written tries again

-- keep is how long a replay's id stays spent.
local function keep()
  return math.max(tonumber(lease), spentKeep)
end

-- ungrant takes a fresh grant back.
local function ungrant()
  redis.call('del', lock)
end

if redis.call('exists', lock) == 0 then
  -- Fresh grant. The fence is written first: if it holds a value of another type the
  -- script fails there, before the lock key is touched.
  local token, flagged = grantToken(fence, req, replay and keep() or nil)
  if token == false then
    return {0, 0} -- a spent request id: it grants nothing again
  end
  if not token then
    return redis.error_reply('WRONGTYPE ' .. fence .. ' holds a string that is not a fencing token')
  end
  if ARGV[4] == '2' then
    redis.call('hset', lock, owner, '1', reqField, req, 'token', token, 'w', '1')
  else
    redis.call('hset', lock, owner, '1', reqField, req, 'token', token)
  end
  if flagged then
    redis.call('hset', lock, spentFlag, '1')
  end
  -- A lock without an expiry would outlive a crashed holder: if the expiry is refused (an
  -- ACL without PEXPIRE), the grant is undone and the script fails with the refusal.
  local r = redis.pcall('pexpire', lock, lease) if refused(r) then ungrant() error(r) end
  return {1, tonumber(token), 1}
end

local got = redis.call('hmget', lock, owner, reqField, 'token', 'w', spentFlag)
local holds, last, token = got[1], got[2], tonumber(got[3] or '0')
if not holds then
  if replay then
    spend(lock, fence, req, serverMs(), keep())
  end
  local pttl = redis.call('pttl', lock)
  if (ARGV[4] == '1' or ARGV[4] == '2') and not got[4] then
    -- A waiter: the release of this tenure must publish. On a full server the mark cannot
    -- be written: no release will tell this waiter, so it is told to try again soon.
    local r = redis.pcall('hset', lock, 'w', '1')
    if refused(r) then
      if pttl < 0 or pttl > markRetry then
        pttl = markRetry
      end
    end
  end
  return {0, pttl}
end
if last == req then
  return {1, token, tonumber(holds)}
end
local now
if got[5] or replay then
  now = serverMs()
  if fenceSpent(fence, req, now) then
    return {0, 0}
  end
end
-- Re-entry never shortens the lease it finds. The lease comes before the count, so that a
-- refused PTTL or PEXPIRE fails the re-entry before it counts a hold.
if redis.call('pttl', lock) < tonumber(lease) then
  redis.call('pexpire', lock, lease)
end
holds = redis.call('hincrby', lock, owner, '1')
redis.call('hset', lock, reqField, req)
if replay then
  spend(lock, fence, req, now, keep())
end
return {1, token, holds}
