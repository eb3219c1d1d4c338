#!lua flags=allow-oom
-- fair_release: give back one hold of a fair lock; on the last hold, wake only the queue head.
-- KEYS[1] = lock hash (see fair_acquire.lua)
-- KEYS[2] = release record of this request (see release.lua): written when this request gives
--           back the owner's last hold, for ARGV[4] ms, so that a replay is answered truly
-- KEYS[3] = queue zset (see fair_acquire.lua)
-- KEYS[4] = alive zset (see fair_acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = request id, a sequence number (lib_seq.lua: the same one is answered, not applied
--           again; one below the owner's last applied is refused with -3)
-- ARGV[3] = release channel: when the last hold is given back, the queue head (after dead
--           places are purged) is told with the message '=' .. head; nothing is published
--           when the queue is empty ('' publishes nothing)
-- ARGV[4] = how long to remember a full release, in milliseconds (> 0)
-- ARGV[5], ARGV[6], ARGV[7] unused ('')
-- ARGV[8] = (optional) keep: a give-back of a hold the Client let go of, applied only while
--           the Client counts more than keep of the owner's holds (see release.lua); else -4
-- returns n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the head was told
--         -1      this owner holds no hold (never held, released, expired or taken)
--         -3      superseded: the owner's later operation was applied (lib_seq.lua)
--         -4      (with keep) the Client counts no more than keep holds: nothing given back
--                 (the number is recorded: the owner's earlier sends are refused after it)
--         a WRONGTYPE error, with nothing written, when a key holds another type
-- A plain lock's fast form written as a string ('~<owner> <seq>', the fast grant's SET; see
-- lib_fast.lua) is read as its hash form: a lock this owner does not hold.
-- Runs with allow-oom: giving a lock back must work on a full server.
--#include lib_publish
--#include lib_seq
local lock, record, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, req, channel = ARGV[1], ARGV[2], ARGV[3]
local reqField = 'q:' .. owner

local keep = tonumber(ARGV[8])
local got = redis.pcall('hmget', lock, owner, reqField) if type(got) == 'table' and got.err and string.sub(got.err, 1, 10) ~= 'WRONGTYPE ' then error(got) end
if got.err then
  -- Not a hash: a plain lock's fast form written as a string (the fast grant's SET:
  -- '~<owner> <seq>', a Mutex handle's hold, never a fair owner's) holds nothing of this
  -- owner; another string keeps HMGET's error.
  local v = redis.call('get', lock)
  if string.byte(v) ~= 126 then
    return got
  end
  got = {false, false}
end
local holds = got[1]
local last, mine = seqLast(owner, got[2], req)
if not holds then
  if redis.call('exists', record) == 1 then
    return 0
  end
  return -1
end
if last == req then
  return tonumber(holds)
end
if superseded(req, last) then
  return -3 -- the owner's later operation was applied (lib_seq.lua): nothing written
end
if keep and tonumber(mine or holds) <= keep then
  -- Nothing to give back; the number is recorded all the same (see release.lua).
  redis.call('hset', lock, reqField, (seqPut(owner, got[2], req, 0, holds)))
  return -4
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, owner, -1)
  redis.call('hset', lock, reqField, (seqPut(owner, got[2], req, -1, holds)))
  return holds
end
-- The last hold. Check the types of the keys still to be read before writing anything (the
-- record is a string that SET replaces whatever it held).
for i = 3, 4 do
  local t = redis.call('type', KEYS[i]).ok
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end

-- Purge the places of waiters that stopped refreshing them, then wake the head alone. This
-- comes before the lock goes (the head reads the message only after this script, and a purge
-- takes only dead places), so that a refused call fails the release before it frees the lock.
local time = redis.call('time')
local now = math.floor((tonumber(time[1]) * 1000000 + tonumber(time[2])) / 1000)
local dead = redis.call('zrangebyscore', alive, '-inf', '(' .. now)
for _, o in ipairs(dead) do
  redis.call('zrem', queue, o)
end
if #dead > 0 then
  redis.call('zremrangebyscore', alive, '-inf', '(' .. now)
end
local head = redis.call('zrange', queue, 0, 0)[1]
while head and not redis.call('zscore', alive, head) do
  redis.call('zrem', queue, head)
  head = redis.call('zrange', queue, 0, 0)[1]
end
if head and channel ~= '' then
  publish(channel, '=' .. head)
end
redis.call('del', lock)
redis.call('set', record, '1', 'px', ARGV[4])
return 0
