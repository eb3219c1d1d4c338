-- sem_delete: delete a semaphore.
-- KEYS[1] = semaphore (string: the number of available permits)
-- returns 1  it existed and was deleted
--         0  it did not exist
-- A key of another type is left untouched: the script fails. The request log is kept (it
-- expires by itself), so that replays of requests still in flight are answered truly.
--#include lib_int
local sem = KEYS[1]
local v = redis.call('get', sem)
local avail = tonumber(v or '0')
if v and not isInt(v) then -- a count is an integer as INCRBY reads it
  return redis.error_reply('WRONGTYPE the key holds a string that is not a semaphore')
end
if not v then
  return 0
end
redis.call('del', sem)
return 1
