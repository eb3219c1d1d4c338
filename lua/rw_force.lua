-- rw_force: free a read-write lock, its write hold and every read hold, whoever holds them,
-- and wake every waiter.
-- KEYS[1] = lock hash (see rw_acquire.lua)
-- KEYS[2] = leases zset (see rw_acquire.lua)
-- ARGV[1] = the waiting writers' channel ('' publishes nothing); told '*' (wake every writer)
-- ARGV[2] = the waiting readers' channel ('' publishes nothing); told '*' (wake every reader)
-- returns 1 if a lock was removed, 0 if there was none;
--         a WRONGTYPE error (and nothing deleted) if the key is not a read-write lock
-- Waiting writers' claims are kept: they belong to live waiters. DEL and PUBLISH are
-- accepted by a full (noeviction) server.
--#include lib_publish
local lock, leases = KEYS[1], KEYS[2]
local t = redis.call('type', lock).ok
if t == 'none' then
  redis.call('del', leases)
  return 0
end
if t ~= 'hash' or redis.call('hexists', lock, 'mode') == 0 then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a read-write lock')
end
-- The waiters are told first (they read the message only after this script), so that a
-- refused PUBLISH (an ACL without it) fails the script before it changes anything.
for i = 1, 2 do
  if ARGV[i] ~= '' then
    publish(ARGV[i], '*')
  end
end
redis.call('del', lock, leases)
return 1
