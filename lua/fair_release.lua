#!lua flags=allow-oom
-- fair_release: give back one hold of a fair lock; on the last hold, wake only the queue head.
-- KEYS[1] = lock hash (see fair_acquire.lua)
-- KEYS[2] = released hash: field <owner> = the request that gave back that owner's last hold
--           (remembered for ARGV[4] ms, at most 256 owners, so that a replay can be answered)
-- KEYS[3] = queue zset (see fair_acquire.lua)
-- KEYS[4] = alive zset (see fair_acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = request id (a replay with the same id is answered, not applied again)
-- ARGV[3] = release channel: when the last hold is given back, the queue head (after dead
--           places are purged) is told with the message '=' .. head; nothing is published
--           when the queue is empty ('' publishes nothing)
-- ARGV[4] = how long to remember a full release, in milliseconds (> 0)
-- returns n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the head was told
--         -1      this owner holds no hold (never held, released, expired or taken)
--         a WRONGTYPE error, with nothing written, when a key holds another type
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock, released, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
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
-- The last hold. Check the types of the keys still to be written before writing anything.
local want = {'hash', 'zset', 'zset'}
for i = 2, 4 do
  local t = redis.call('type', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i - 1] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end
if redis.call('hlen', released) >= 256 then
  redis.call('del', released)
end
redis.call('hset', released, owner, req)
redis.call('pexpire', released, ARGV[4])
redis.call('del', lock)

-- Purge the places of waiters that stopped refreshing them, then wake the head alone.
local time = redis.call('time')
local now = math.floor((tonumber(time[1]) * 1000000 + tonumber(time[2])) / 1000)
local dead = redis.call('zrangebyscore', alive, '-inf', '(' .. now)
for _, o in ipairs(dead) do
  redis.call('zrem', queue, o)
end
if #dead > 0 then
  redis.call('zremrangebyscore', alive, '-inf', '(' .. now)
end
local head = redis.call('zrange', queue, 0, 0)[1]
while head and not redis.call('zscore', alive, head) do
  redis.call('zrem', queue, head)
  head = redis.call('zrange', queue, 0, 0)[1]
end
if head and channel ~= '' then
  redis.call('publish', channel, '=' .. head)
end
return 0
