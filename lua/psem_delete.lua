-- psem_delete: delete a permit semaphore and its leases.
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- returns 1  the semaphore existed and was deleted
--         0  it did not exist (leases left behind, if any, are deleted too)
-- A key of another type is left untouched: the script fails before it deletes anything. The
-- request log is kept (it expires by itself), so that replays of requests still in flight are
-- answered truly.
local sem, leases = KEYS[1], KEYS[2]
local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
redis.call('zcard', leases)
redis.call('del', sem, leases)
return p and 1 or 0
