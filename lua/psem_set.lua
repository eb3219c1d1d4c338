-- psem_set: set the number of permits of a permit semaphore, only if it does not exist
-- (TrySetPermits).
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = request log (hash: request id -> answer of an applied request)
-- KEYS[3] = request log times (zset: request id -> when the record may go, server ms)
-- ARGV[1] = n, the permits (>= 0)
-- ARGV[2] = request id (unique per call; a replay with the same id is answered, not applied again)
-- ARGV[3] = how long to remember an applied request, in milliseconds (> 0)
-- ARGV[4] = channel, told '*' (wake every waiter) when n > 0
-- returns 1  set (by this send, or by an earlier send of this request)
--         0  the semaphore exists: nothing changed
-- A key of another type fails the script before it changes anything.
--#include lib_refusal
--#include lib_reqlog
--#include lib_publish
local sem, log, logx = KEYS[1], KEYS[2], KEYS[3]
local n, req, keep, channel = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]

local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
if redis.call('hget', log, req) then
  return 1
end
if p then
  return 0
end

-- The waiters are told first (they read the message only after this script), so that a
-- refused PUBLISH (an ACL without it) fails the request before it changes anything.
if n > 0 then
  publish(channel, '*')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
remember(log, logx, req, '1', now, keep)

-- HSET, which the record's first write called already, cannot be refused here.
redis.call('hset', sem, 'permits', ARGV[1])
return 1
