-- lib_rwextend: not a script; included ("--#include lib_rwextend") by rw_renew_read.lua and
-- rw_renew_write.lua, after their now and ms.
-- rwExtend renews one live hold of a read-write lock: member's lease in the leases zset, whose
-- score s (ms) is still ahead of now, ends at the later of s and now + lease, and the lock and
-- its leases then live as long as the longest lease. The longest lease is read, and the keys'
-- expiry set, before the hold's lease is written, so that a refused call (an ACL that lacks
-- it) fails the renewal first.
local function rwExtend(lock, leases, member, s, lease)
  local top = redis.call('zrange', leases, -1, -1, 'withscores')
  local ttl = ms(math.max(tonumber(top[2]), now + lease) - now)
  redis.call('pexpire', lock, ttl)
  redis.call('pexpire', leases, ttl)
  if s < now + lease then
    redis.call('zadd', leases, ms(now + lease), member)
  end
end
