-- latch_set: create a count-down latch with a count, only if it does not exist.
-- KEYS[1] = latch (a string holding the count, > 0; deleted when the count reaches 0)
-- KEYS[2] = request record: written (for ARGV[2] ms) only by a request that changed something,
--           it holds the reply, so that a replay with the same request id is answered,
--           not applied again (a request that changed nothing may simply run again)
-- ARGV[1] = count (an integer > 0)
-- ARGV[2] = how long to remember the reply, in milliseconds (> 0)
-- returns 1  the latch was created with the count
--         0  a latch already exists (its count is left as it is)
--         a WRONGTYPE error (nothing written) if the key holds anything but a latch's count
local latch, record = KEYS[1], KEYS[2]
--#include lib_latch

local done = replied(record)
if done then
  return done
end
local t = redis.call('type', latch).ok
local r = 0
if t == 'none' then
  redis.call('set', latch, ARGV[1])
  r = 1
elseif not latchCount(latch, t) then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a count-down latch')
end
if r == 1 then
  redis.call('set', record, r, 'px', ARGV[2])
end
return r
