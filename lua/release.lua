#!lua flags=allow-oom
-- release: give back one hold of a reentrant lock, optionally passing it on to a successor.
-- KEYS[1] = lock hash (see acquire.lua)
-- KEYS[2] = release record of this request (a string key of its own, unique to the request id:
--           the caller derives it from the lock's keys and ARGV[2], in the lock's hash slot);
--           written when this request gives back the owner's last hold, for ARGV[4] ms, so
--           that a replay is answered truly however many other releases came between
-- KEYS[3] = fence (only with a successor; see acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = request id (a replay with the same id is answered, not applied again)
-- ARGV[3] = release channel, published when the last hold is given back and not passed on
--           ('' publishes nothing)
-- ARGV[4] = how long to remember a full release, in milliseconds (> 0)
-- ARGV[5], ARGV[6], ARGV[7] (optional) = a successor: owner id, lease in milliseconds and
--           request id of a waiter that the last hold passes to directly (a fresh grant, with
--           a new fencing token, and no publish)
-- returns, without a successor:
--         n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the channel was told
--         -1      this owner holds no hold (never held, released, expired or taken)
--         with a successor, {n, token}: n as above, and token > 0 when the lock passed to the
--         successor (0 when it did not: then the channel was told as usual)
--         a WRONGTYPE error, with nothing written, when a key holds another type (or the
--         fence a string that is not a token)
-- Runs with allow-oom: giving a lock back must work on a full server.
--#include lib_fence
local lock, record = KEYS[1], KEYS[2]
local owner, req, channel = ARGV[1], ARGV[2], ARGV[3]
local next, nextLease, nextReq = ARGV[5], ARGV[6], ARGV[7]
local reqField = 'q:' .. owner

local function reply(n, token)
  if next then
    return {n, token or 0}
  end
  return n
end

local got = redis.call('hmget', lock, owner, reqField)
local holds, last = got[1], got[2]
if not holds then
  if redis.call('exists', record) == 1 then
    -- A replay of the final release: tell whether it passed the lock on.
    if next then
      local h = redis.call('hmget', lock, 'q:' .. next, 'token')
      if h[1] == nextReq then
        return {0, tonumber(h[2] or '0')}
      end
    end
    return reply(0)
  end
  return reply(-1)
end
if last == req then
  return reply(tonumber(holds))
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, owner, -1)
  redis.call('hset', lock, reqField, req)
  return reply(holds)
end
-- The last hold. A successor's token is read first, so that a fence of another type fails
-- the script before anything is written.
local token
if next then
  -- A fresh grant to the successor: its token as acquire.lua computes it.
  local now = redis.call('time')
  token = nextToken(KEYS[3], tonumber(now[1]) * 1000000 + tonumber(now[2]))
  if not token then
    return redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ' holds a string that is not a fencing token')
  end
end
redis.call('set', record, '1', 'px', ARGV[4])
redis.call('del', lock)
if next then
  -- Pass the lock on, without a publish: nobody else is told it was free.
  setFence(KEYS[3], token)
  redis.call('hset', lock, next, 1, 'q:' .. next, nextReq, 'token', token)
  redis.call('pexpire', lock, nextLease)
  return {0, tonumber(token)}
end
if channel ~= '' then
  redis.call('publish', channel, '0')
end
return 0
