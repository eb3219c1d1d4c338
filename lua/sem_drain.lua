-- sem_drain: take every available permit of a semaphore (DrainPermits).
-- KEYS[1] = semaphore (string: the number of available permits; may be negative; absent = 0)
-- KEYS[2] = request log (hash: request id -> answer of an applied request)
-- KEYS[3] = request log times (zset: request id -> when the record may go, server ms)
-- ARGV[1] = request id (unique per call; a replay with the same id is answered, not applied
--           again); a resend sends it as '+' .. id, or '!' .. id once its caller has gone:
--           either way an answer of 0 is remembered too, so that the request's first send, if
--           it reaches Redis last, drains nothing once permits are back
-- ARGV[2] = how long to remember an applied request, in milliseconds (> 0)
-- returns n >= 0  the permits taken (by this send, or by an earlier send of this request); a
--                 count of zero or less is left as it is and 0 returned. n is an integer reply
--                 below 2^53, and a bulk reply of its decimal digits from 2^53 on (a Lua number
--                 is not exact there; the count, up to 2^63-1, is never read as one for the
--                 drain: DECRBY and the request log get its exact digits)
-- A key of another type fails the script before it changes anything.
--#include lib_refusal
--#include lib_reqlog
--#include lib_spent
--#include lib_int
local sem, log, logx = KEYS[1], KEYS[2], KEYS[3]
local keep = tonumber(ARGV[2])
local req, replay = replayOf(ARGV[1])

-- taken returns the count n (a string of INCRBY's digits, > 0 or '0') as the reply: an
-- integer while a Lua number holds it exactly, else the string.
local function taken(n)
  local f = tonumber(n)
  if f < 9007199254740992 then -- 2^53: every integer below is exact
    return f
  end
  return n
end

local v = redis.call('get', sem)
local avail = tonumber(v or '0')
if v and not isInt(v) then -- a count is an integer as INCRBY reads it
  return redis.error_reply('WRONGTYPE the key holds a string that is not a semaphore')
end
local seen = redis.call('hget', log, req)
if seen then
  return taken(seen)
end
if avail <= 0 then
  if replay then
    -- Its first send may still be on its way (its reply was lost, not necessarily the
    -- request): it must drain nothing either, or it takes permits nobody is told of, and a
    -- semaphore's permits never come back by themselves (a best effort: a refused write, on
    -- a full server say, keeps no record).
    pcall(remember, log, logx, req, '0', serverMs(), keep)
  end
  return 0
end

local now = serverMs()
remember(log, logx, req, v, now, keep)

-- DECRBY rather than SET: a time to live set by TrySetPermits stays. By v, the count's exact
-- digits: avail, a Lua number, is not exact from 2^53 on (it left permits behind).
local r = redis.pcall('decrby', sem, v) if refused(r) then forget(log, logx, req) error(r) end
return taken(v)
