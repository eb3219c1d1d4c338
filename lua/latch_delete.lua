#!lua flags=allow-oom
-- latch_delete: delete a count-down latch whatever its count, and wake its waiters.
-- KEYS[1] = latch (a string holding the count; see latch_set.lua)
-- KEYS[2] = request record: written (for ARGV[3] ms) only by a request that changed something,
--           it holds the reply, so that a replay with the same request id is answered,
--           not applied again (a request that changed nothing may simply run again)
-- ARGV[1] = channel published when a latch was deleted
-- ARGV[2] = message to publish (the wake-every-waiter payload)
-- ARGV[3] = how long to remember the reply, in milliseconds (> 0)
-- returns 1  a latch was deleted and the channel told
--         0  there was no latch
--         a WRONGTYPE error (nothing deleted) if the key holds anything but a latch's count
-- Runs with allow-oom: like a count-down, it must work on a full server.
local latch, record = KEYS[1], KEYS[2]
--#include lib_latch
--#include lib_publish

local done = replied(record)
if done then
  return done
end
local t = redis.call('type', latch).ok
local r = 0
if t ~= 'none' then
  if not latchCount(latch, t) then
    return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a count-down latch')
  end
  -- The waiters are told before the latch goes (they read the message only after this
  -- script), so that a refused PUBLISH (an ACL without it) fails the request before it
  -- changes anything.
  publish(ARGV[1], ARGV[2])
  redis.call('del', latch)
  r = 1
end
if r == 1 then
  redis.call('set', record, r, 'px', ARGV[3])
end
return r
