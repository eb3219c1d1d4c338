#!lua flags=allow-oom
-- latch_count_down: count a count-down latch down by one; at zero, delete it and wake its
-- waiters.
-- KEYS[1] = latch (a string holding the count; see latch_set.lua)
-- KEYS[2] = request record: written (for ARGV[3] ms) only by a request that changed something,
--           it holds the reply, so that a replay with the same request id is answered,
--           not applied again (a request that changed nothing may simply run again)
-- ARGV[1] = channel published when the count reaches zero
-- ARGV[2] = message to publish (the wake-every-waiter payload)
-- ARGV[3] = how long to remember the reply, in milliseconds (> 0)
-- returns n >= 1  the count after this count-down (the latch stays)
--         0       the count reached zero: the latch was deleted and the channel told
--         -1      there was no latch: nothing changed
--         a WRONGTYPE error (nothing written) if the key holds anything but a latch's count
-- Runs with allow-oom: counting down (like a release) must work on a full server.
local latch, record = KEYS[1], KEYS[2]
--#include lib_latch
--#include lib_refusal
--#include lib_publish

-- unrecord takes the request's record back.
local function unrecord()
  redis.call('del', record)
end

local done = replied(record)
if done then
  return done
end
local t = redis.call('type', latch).ok
local n = -1
if t ~= 'none' then
  local c = latchCount(latch, t)
  if not c then
    return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a count-down latch')
  end
  -- A refused call (an ACL that lacks it) must fail the count-down before it changes the
  -- count: the record is written before the count, and taken back if the count is refused;
  -- the waiters are told before the latch goes (they read the message only after this
  -- script), and the record written last.
  if c > 1 then
    n = c - 1
    redis.call('set', record, n, 'px', ARGV[3])
    local r = redis.pcall('decr', latch) if refused(r) then unrecord() error(r) end
  else
    n = 0
    publish(ARGV[1], ARGV[2])
    redis.call('del', latch)
    redis.call('set', record, n, 'px', ARGV[3])
  end
end
return n
