#!lua flags=allow-oom
-- psem_release: give back one permit of a permit semaphore.
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- KEYS[3] = request log (hash: request id -> answer of an applied request)
-- KEYS[4] = request log times (zset: request id -> when the record may go, server ms)
-- ARGV[1] = permit id
-- ARGV[2] = request id (unique per call; a replay with the same id is answered, not applied again)
-- ARGV[3] = how long to remember an applied request, in milliseconds (> 0)
-- ARGV[4] = channel, told '0' (wake one waiter per subscriber) when a permit is given back
-- returns 1  released (by this send, or by an earlier send of this request)
--         0  no live permit has this id: unknown, released, or its lease ended
-- Runs with allow-oom: giving a permit back must work on a full server. Every key is read
-- before anything is written, so a key of another type fails the script before it changes
-- anything.
--#include lib_refusal
--#include lib_reqlog
--#include lib_publish
local sem, leases, log, logx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, req, keep, channel = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]

local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
local s = redis.call('zscore', leases, id)
if redis.call('hget', log, req) then
  return 1
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not s or tonumber(s) <= now then
  return 0
end

-- The ended leases go, and a waiter is told, first (it reads the message only after this
-- script), so that a refused ZREMRANGEBYSCORE or PUBLISH (an ACL without it) fails the
-- request before it changes anything else than ended leases.
redis.call('zremrangebyscore', leases, '-inf', now)
publish(channel, '0')
remember(log, logx, req, '1', now, keep)

local r = redis.pcall('zrem', leases, id) if refused(r) then forget(log, logx, req) error(r) end
return 1
