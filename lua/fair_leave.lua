#!lua flags=allow-oom
-- fair_leave: remove a waiter's place from a fair lock's queue when its wait gives up.
-- KEYS[1] = lock hash (see fair_acquire.lua; only its remaining lease is read)
-- KEYS[2] = queue zset (see fair_acquire.lua)
-- KEYS[3] = alive zset (see fair_acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = release channel: if the head changed and the lock is free, or will be within
--           a heartbeat, the new head is told with the message '=' .. head ('' publishes
--           nothing)
-- ARGV[3] = heartbeat in milliseconds (see fair_acquire.lua)
-- returns 1 if the owner had a place, 0 if not (safe to run twice: the second run finds none)
--         a WRONGTYPE error, with nothing written, when a zset key holds another type
-- Dead places (see fair_acquire.lua) are purged too. Runs with allow-oom: leaving only
-- removes.
--#include lib_publish
local lock, queue, alive = KEYS[1], KEYS[2], KEYS[3]
local owner, channel, hb = ARGV[1], ARGV[2], tonumber(ARGV[3])

for i = 2, 3 do
  local t = redis.call('type', KEYS[i]).ok
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end

local function head()
  return redis.call('zrange', queue, 0, 0)[1]
end
local head0 = head()

local had = redis.call('zrem', queue, owner)
redis.call('zrem', alive, owner)

local time = redis.call('time')
local now = math.floor((tonumber(time[1]) * 1000000 + tonumber(time[2])) / 1000)
local dead = redis.call('zrangebyscore', alive, '-inf', '(' .. now)
for _, o in ipairs(dead) do
  redis.call('zrem', queue, o)
end
if #dead > 0 then
  redis.call('zremrangebyscore', alive, '-inf', '(' .. now)
end
local h = head()
while h and not redis.call('zscore', alive, h) do
  redis.call('zrem', queue, h)
  h = head()
end

if h and h ~= head0 and channel ~= '' then
  local pttl = redis.call('pttl', lock)
  if pttl == -2 or (pttl >= 0 and pttl < hb) then
    publish(channel, '=' .. h)
  end
end
return had
