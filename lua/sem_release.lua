#!lua flags=allow-oom
-- sem_release: add n permits to a semaphore (Release, ReleaseIfExists, AddPermits).
-- KEYS[1] = semaphore (string: the number of available permits; may be negative; absent = 0)
-- KEYS[2] = request log (hash: request id -> answer of an applied request)
-- KEYS[3] = request log times (zset: request id -> when the record may go, server ms)
-- ARGV[1] = n, the permits to add (non-zero; negative takes permits away, even below zero)
-- ARGV[2] = request id (unique per call; a replay with the same id is answered, not applied again)
-- ARGV[3] = how long to remember an applied request, in milliseconds (> 0)
-- ARGV[4] = channel, told '*' (wake every waiter) when n > 0
-- ARGV[5] = '1': only if the semaphore exists; '0': create it when absent
-- returns 1  applied (by this send, or by an earlier send of this request)
--         0  the semaphore does not exist and ARGV[5] is '1': nothing changed
-- Runs with allow-oom: giving permits back must work on a full server. A key of another type
-- fails the script before it changes anything.
--#include lib_refusal
--#include lib_reqlog
--#include lib_publish
--#include lib_int
local sem, log, logx = KEYS[1], KEYS[2], KEYS[3]
local n, req, keep, channel = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]

local v = redis.call('get', sem)
local avail = tonumber(v or '0')
if v and not isInt(v) then -- a count is an integer as INCRBY reads it
  return redis.error_reply('WRONGTYPE the key holds a string that is not a semaphore')
end
if redis.call('hget', log, req) then
  return 1
end
if not v and ARGV[5] == '1' then
  return 0
end

-- The waiters are told first (they read the message only after this script), so that a
-- refused PUBLISH (an ACL without it) fails the request before it changes anything.
if n > 0 then
  publish(channel, '*')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
remember(log, logx, req, '1', now, keep)

-- By ARGV[1], the exact digits: n, a Lua number, is not exact from 2^53 on (a drain's
-- count given back in the background can be that large).
local r = redis.pcall('incrby', sem, ARGV[1]) if refused(r) then forget(log, logx, req) error(r) end
return 1
