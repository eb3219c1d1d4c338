-- rw_state: read the state of a read-write lock, counting only holds whose lease is live.
-- KEYS[1] = lock hash (see rw_acquire.lua)
-- KEYS[2] = leases zset (see rw_acquire.lua)
-- KEYS[3] = (optional) fence (see rw_acquire.lua): read only to tell a plain lock's ghost
-- ARGV[1] = owner id ('' for none)
-- returns {write, readers, ownerWrite, ownerRead}: write is 1 while a write hold is live,
--         readers the number of owners with a live read hold, ownerWrite and ownerRead the
--         owner's hold counts of each kind
--         a WRONGTYPE error if the key is not a read-write lock
-- A plain lock's fast form (lib_fast.lua; docs/DESIGN.md section 5) is another kind of lock,
-- as its full form is; one whose <seq> the fence records as spent is a ghost, read as a free
-- lock ({0, 0, 0, 0}; this script leaves it to the next that writes). A string '~<owner>
-- <seq>' (the fast grant's SET) is the same form, as a hash with that token field alone.
-- Reads only.
--#include lib_ghost


local lock, leases, owner = KEYS[1], KEYS[2], ARGV[1]
local mode = redis.pcall('hget', lock, 'mode') if type(mode) == 'table' and mode.err and string.sub(mode.err, 1, 10) ~= 'WRONGTYPE ' then error(mode) end
if type(mode) == 'table' then
  -- Not a hash: a plain lock's fast form written as a string is read as its hash form.
  local v = fastString(lock)
  if not v then
    return mode -- a user's string: HGET's error
  end
  if not ghost(lock, KEYS[3], v) then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
  return {0, 0, 0, 0}
end
if not mode then
  if redis.call('exists', lock) == 1 and not ghost(lock, KEYS[3]) then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
  return {0, 0, 0, 0}
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local writer = redis.call('hget', lock, 'writer')
local write, readers, ownerWrite, ownerRead = 0, 0, 0, 0
for _, f in ipairs(redis.call('zrangebyscore', leases, '(' .. string.format('%.0f', now), '+inf')) do
  if f == writer then
    write = 1
    if f == owner then
      ownerWrite = tonumber(redis.call('hget', lock, f) or '0')
    end
  else
    readers = readers + 1
    if f == 'r:' .. owner then
      ownerRead = tonumber(redis.call('hget', lock, f) or '0')
    end
  end
end
return {write, readers, ownerWrite, ownerRead}
