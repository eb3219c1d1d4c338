-- rw_force: free a read-write lock, its write hold and every read hold, whoever holds them,
-- and wake every waiter.
-- KEYS[1] = lock hash (see rw_acquire.lua)
-- KEYS[2] = leases zset (see rw_acquire.lua)
-- KEYS[3] = (optional) fence (see rw_acquire.lua): read only to tell a plain lock's ghost
-- ARGV[1] = the waiting writers' channel ('' publishes nothing); told '*' (wake every writer)
-- ARGV[2] = the waiting readers' channel ('' publishes nothing); told '*' (wake every reader)
-- ARGV[3] = (optional) the holds the caller saw: '' or absent frees whoever holds the lock;
--           otherwise the write hold's fencing token seen ('0': no write hold seen), and the
--           lock is freed only if every hold live now (its lease not ended) is among
--           ARGV[4...] and a live write hold has this token
-- ARGV[4...] = with ARGV[3]: the hold fields seen (<owner> for the write hold, r:<owner> for
--           an owner's read holds)
-- returns 1 if a lock was removed, 0 if there was none;
--         -1 (and nothing changed) if ARGV[3] is given and a live hold was not seen, or the
--         write hold has another token;
--         a WRONGTYPE error (and nothing deleted) if the key is not a read-write lock
-- Waiting writers' claims are kept: they belong to live waiters. DEL and PUBLISH are
-- accepted by a full (noeviction) server.
-- A plain lock's fast form (lib_fast.lua; docs/DESIGN.md section 5) is another kind of lock,
-- as its full form is (WRONGTYPE); one whose <seq> the fence records as spent is a ghost,
-- a free lock: it is deleted, and the answer is 0, as for no lock. A string '~<owner> <seq>' (the fast grant's SET) is the
-- same form, as a hash with that token field alone.
--#include lib_publish
--#include lib_ghost

local lock, leases = KEYS[1], KEYS[2]
local t = redis.call('type', lock).ok
if t == 'string' then
  -- A plain lock's fast form written as a string is read as its hash form.
  local v = redis.call('get', lock)
  if string.match(v, fastPattern) then
    if not ghost(lock, KEYS[3], v) then
      return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
    end
    redis.call('del', lock)
    t = 'none'
  end
end
if t == 'hash' and redis.call('hexists', lock, 'mode') == 0 then
  if not ghost(lock, KEYS[3]) then
    return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a read-write lock')
  end
  redis.call('del', lock)
  t = 'none'
end
if t == 'none' then
  redis.call('del', leases)
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a read-write lock')
end
if ARGV[3] and ARGV[3] ~= '' then
  local seen = {}
  for i = 4, #ARGV do
    seen[ARGV[i]] = true
  end
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local writer = redis.call('hget', lock, 'writer')
  local write = redis.call('hget', lock, 'mode') == 'write'
  for _, f in ipairs(redis.call('zrangebyscore', leases, '(' .. string.format('%.0f', now), '+inf')) do
    local isWrite = write and f == writer
    if (isWrite or string.sub(f, 1, 2) == 'r:') and tonumber(redis.call('hget', lock, f) or '0') >= 1 then
      if not seen[f] then
        return -1
      end
      if isWrite and (redis.call('hget', lock, 'token') or '0') ~= ARGV[3] then
        return -1
      end
    end
  end
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
