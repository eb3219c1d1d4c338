#!lua flags=allow-oom
-- release: give back one hold of a reentrant lock.
-- KEYS[1] = lock hash (see acquire.lua)
-- KEYS[2] = released hash: field <owner> = the request that gave back that owner's last hold
--           (remembered for ARGV[4] ms, at most 256 owners, so that a replay can be answered)
-- ARGV[1] = owner id
-- ARGV[2] = request id (a replay with the same id is answered, not applied again)
-- ARGV[3] = release channel, published when the last hold is given back ('' publishes nothing)
-- ARGV[4] = how long to remember a full release, in milliseconds (> 0)
-- returns n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the channel was told
--         -1      this owner holds no hold (never held, released, expired or taken)
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock, released = KEYS[1], KEYS[2]
local owner, req, channel = ARGV[1], ARGV[2], ARGV[3]
local reqField = owner .. ':r'

local holds = redis.call('hget', lock, owner)
if not holds then
  if redis.call('hget', released, owner) == req then
    return 0
  end
  return -1
end
if redis.call('hget', lock, reqField) == req then
  return tonumber(holds)
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, owner, -1)
  redis.call('hset', lock, reqField, req)
  return holds
end
-- The last hold. The record is written first so that a key of another type fails the
-- script before the lock is touched.
if redis.call('hlen', released) >= 256 then
  redis.call('del', released)
end
redis.call('hset', released, owner, req)
redis.call('pexpire', released, ARGV[4])
redis.call('del', lock)
if channel ~= '' then
  redis.call('publish', channel, '0')
end
return 0
