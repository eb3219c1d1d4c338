-- psem_acquire: take one permit of a permit semaphore, with a lease.
-- KEYS[1] = semaphore (hash: field permits = the number of permits; absent = 0; field spent =
--           the spent permit ids, see lib_spent.lua, while a resend granted one lately)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- ARGV[1] = permit id (made by the caller, unique; a replay with the same id is answered by
--           the live permit it finds, not granted twice); a resend sends it as '+' .. id,
--           or '!' .. id once its caller has gone: the id is spent when the resend grants
--           (and, with '!', when it is refused too), and a later send of it (its first send,
--           reaching Redis last) grants nothing ({0, 0}), even after the permit was given
--           back. (A refused '+' resend spends nothing: the caller's later attempts reuse
--           the id.) A resend that finds the id's permit live (granted by an earlier send)
--           spends the id too: no send of it reaching Redis after the permit was given back
--           grants it again.
-- ARGV[2] = lease in milliseconds (> 0)
-- ARGV[3] = '1' to spend the id only (optional): a call that ends without a permit after a
--           send of the id whose reply was lost spends it so. Nothing is granted; the id is
--           spent (in a semaphore that exists), and the answer is {1, left} when its permit
--           is live (an earlier send granted it: the caller gives it back), else {0, 0}.
-- returns {1}        granted by this send: the lease ends lease ms from now
--         {1, left}  granted by an earlier send of this permit id (a resend's, or the late
--                    first send of an earlier attempt of the same Acquire): its lease ends
--                    left ms from now (> 0), which may be less than lease ms
--         {0, wait}  no permit is free; wait = milliseconds until the lease whose end makes
--                    room ends, -1 when no lease end will (only more permits will)
-- Expired leases are purged. Every key is read before anything is written, so a key of
-- another type fails the script before it changes anything.
--#include lib_refusal
--#include lib_spent
local sem, leases = KEYS[1], KEYS[2]
local id, replay, gone = replayOf(ARGV[1])
local lease = tonumber(ARGV[2])

local got = redis.call('hmget', sem, 'permits', 'spent')
local p = got[1]
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
local permits = tonumber(p or '0')
local only = ARGV[3] == '1'
local mine = redis.call('zscore', leases, id)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept, spent = '', false -- the live spent ids, to keep; whether id is among them
if got[2] then
  kept, spent = liveSpent(got[2], now, id, 1)
end

-- spendID records the permit id as spent, keeping the live records (a best effort: a refused
-- write keeps no record). Only a semaphore's existing hash keeps records: one that does not
-- exist has no permits to grant.
local function spendID()
  if p and not spent then
    redis.pcall('hset', sem, 'spent', kept .. spentRecord(id, now + math.max(lease, spentKeep)))
  end
end

if mine and tonumber(mine) > now then
  if replay then
    spendID()
  end
  return {1, tonumber(mine) - now}
end
if spent then
  return {0, 0} -- a spent permit id grants nothing again
end
if only then
  spendID()
  return {0, 0}
end

-- unlease takes the lease back.
local function unlease()
  redis.call('zrem', leases, id)
end

redis.call('zremrangebyscore', leases, '-inf', now)
local held = redis.call('zcard', leases)
if held < permits then
  -- The leases key outlives every lease in it, and no more. Its time to live is read before
  -- the lease is written, and a refused expiry takes the lease back, so that a refused call
  -- (an ACL that lacks it) leaves no leases key without an expiry.
  local ttl = redis.call('pttl', leases)
  redis.call('zadd', leases, string.format('%.0f', now + lease), id)
  if ttl < lease then
    local r = redis.pcall('pexpire', leases, lease) if refused(r) then unlease() error(r) end
  end
  if replay then
    spendID()
  elseif got[2] and kept == '' then
    redis.pcall('hdel', sem, 'spent') -- every record has run out
  end
  return {1}
end
if gone then
  spendID() -- the caller has gone: no later attempt reuses the id
end
if permits <= 0 then
  return {0, -1}
end
-- Room comes when all but permits-1 of the held leases have ended.
local ends = redis.call('zrange', leases, held - permits, held - permits, 'withscores')
return {0, math.max(tonumber(ends[2]) - now, 0)}
