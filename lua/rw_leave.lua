#!lua flags=allow-oom
-- rw_leave: withdraw a waiting writer's claim when its wait gives up.
-- KEYS[1] = writers zset (see rw_acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = the waiting readers' channel ('' publishes nothing): told '*' (wake every
--           reader) when no live claim remains, so that the readers held back come in at once
-- returns 1 if the owner had a claim, 0 if not (safe to run twice: the second run finds none)
--         a WRONGTYPE error, with nothing written, when the key holds another type
-- Runs with allow-oom: leaving only removes.
--#include lib_publish
local writers, owner, channel = KEYS[1], ARGV[1], ARGV[2]
if redis.call('zrem', writers, owner) == 0 then
  return 0
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('zremrangebyscore', writers, '-inf', string.format('%.0f', now))
if redis.call('zcard', writers) == 0 and channel ~= '' then
  publish(channel, '*')
end
return 1
