#!lua flags=allow-oom
-- release: give back one hold of a reentrant lock.
-- KEYS[1] = lock hash, KEYS[2] = fence hash (see acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = request id (a replay with the same id is answered, not applied again)
-- ARGV[3] = release channel, published when the last hold is given back
-- returns n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the channel was told
--         -1      this owner holds no hold (never held, released, expired or taken)
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock, fence = KEYS[1], KEYS[2]
local owner, req, channel = ARGV[1], ARGV[2], ARGV[3]
local reqField = owner .. ':r'

local holds = redis.call('hget', lock, owner)
if not holds then
  if redis.call('hget', fence, 'r') == owner .. ':' .. req then
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
-- The last hold. The fence is written first so that a fence of another type fails the
-- script before the lock is touched.
redis.call('hset', fence, 'r', owner .. ':' .. req)
redis.call('del', lock)
redis.call('publish', channel, '0')
return 0
