#!lua flags=allow-oom
-- release: give back one hold of a reentrant lock, optionally passing it on to a successor.
-- KEYS[1] = lock hash (see acquire.lua)
-- KEYS[2] = released hash: field <owner> = the request that gave back that owner's last hold
--           (remembered for ARGV[4] ms, at most 256 owners, so that a replay can be answered)
-- KEYS[3] = fence hash (only with a successor; see acquire.lua)
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
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock, released = KEYS[1], KEYS[2]
local owner, req, channel = ARGV[1], ARGV[2], ARGV[3]
local next, nextLease, nextReq = ARGV[5], ARGV[6], ARGV[7]
local reqField = owner .. ':r'

local function reply(n, token)
  if next then
    return {n, token or 0}
  end
  return n
end

local holds = redis.call('hget', lock, owner)
if not holds then
  if redis.call('hget', released, owner) == req then
    -- A replay of the final release: tell whether it passed the lock on.
    if next and redis.call('hget', lock, next .. ':r') == nextReq then
      return {0, tonumber(redis.call('hget', KEYS[3], 't') or '0')}
    end
    return reply(0)
  end
  return reply(-1)
end
if redis.call('hget', lock, reqField) == req then
  return reply(tonumber(holds))
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, owner, -1)
  redis.call('hset', lock, reqField, req)
  return reply(holds)
end
-- The last hold. A successor's token is read first and the record written next, so that a
-- key of another type fails the script before the lock is touched.
local token
if next then
  -- A fresh grant to the successor: its token as acquire.lua computes it.
  local now = redis.call('time')
  token = math.max(tonumber(redis.call('hget', KEYS[3], 't') or '0') + 1,
    tonumber(now[1]) * 1000000 + tonumber(now[2]))
  token = string.format('%.0f', token)
end
if redis.call('hlen', released) >= 256 then
  redis.call('del', released)
end
redis.call('hset', released, owner, req)
redis.call('pexpire', released, ARGV[4])
redis.call('del', lock)
if next then
  -- Pass the lock on, without a publish: nobody else is told it was free.
  redis.call('hset', KEYS[3], 't', token)
  redis.call('hset', lock, next, 1, next .. ':r', nextReq)
  redis.call('pexpire', lock, nextLease)
  return {0, tonumber(token)}
end
if channel ~= '' then
  redis.call('publish', channel, '0')
end
return 0
