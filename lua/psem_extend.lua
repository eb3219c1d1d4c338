-- psem_extend: set the lease of a live permit of a permit semaphore to end lease ms from now.
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- ARGV[1] = permit id
-- ARGV[2] = lease in milliseconds (> 0); it may shorten the lease
-- ARGV[3] = channel, told '*' (wake every waiter) when the lease was shortened, so that
--           waiters timing the old end look again
-- returns 1  the permit's lease now ends lease ms from now
--         0  no live permit has this id: unknown, released, or its lease ended
-- Replaying it is harmless: it sets the same lease again, from a later now.
--#include lib_publish
local sem, leases = KEYS[1], KEYS[2]
local id, lease, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
local s = redis.call('zscore', leases, id)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not s or tonumber(s) <= now then
  return 0
end
-- The key's expiry is set, and the waiters told (they read the message only after this
-- script), before the lease is written, so that a refused call (an ACL that lacks it) fails
-- the request before it changes the lease. The key exists: it holds this live lease.
if redis.call('pttl', leases) < lease then
  redis.call('pexpire', leases, lease)
end
if now + lease < tonumber(s) then
  publish(channel, '*')
end
redis.call('zadd', leases, string.format('%.0f', now + lease), id)
return 1
