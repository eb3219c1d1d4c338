#!lua flags=allow-oom
-- rw_release: give back one read hold or one write hold of a read-write lock.
-- KEYS[1] = lock hash (see rw_acquire.lua)
-- KEYS[2] = release record of this request (see release.lua): written when this request gives
--           back the owner's last hold of that kind, for ARGV[4] ms, so that a replay is
--           answered truly
-- KEYS[3] = leases zset (see rw_acquire.lua)
-- KEYS[4] = writers zset: waiting writers' claims (see rw_acquire.lua)
-- KEYS[5] = (optional) fence (see rw_acquire.lua): read only to tell a plain lock's ghost
-- ARGV[1] = owner id
-- ARGV[2] = request id, a sequence number (lib_seq.lua: the same one is answered, not applied
--           again; one below the owner's last applied is refused with -3)
-- ARGV[3] = the released side's channel (unused: ARGV[6] and ARGV[7] name both sides')
-- ARGV[4] = how long to remember a full release, in milliseconds (> 0)
-- ARGV[5] = 'w' for the write hold, 'r' for a read hold
-- ARGV[6] = the waiting writers' channel ('' publishes nothing): told '0' (wake one writer
--           per Client) when the lock becomes free
-- ARGV[7] = the waiting readers' channel ('' publishes nothing): told '*' (wake every
--           reader) when the write hold ends, by release or by lease, and no writer's claim
--           is live (a claimant goes first; readers are woken when the last claim is served
--           or withdrawn, or by their own timer when it runs out)
-- ARGV[8] = (optional) keep: a give-back of a hold the Client let go of, applied only while
--           the Client counts more than keep of the owner's holds of that kind (see
--           release.lua); else -4
-- returns n >= 1  holds of that kind the owner still has
--         0       the owner's last hold of that kind was given back
--         -1      the owner holds no hold of that kind (never held, released, expired, or
--                 removed by a force unlock)
--         -3      superseded: the owner's later operation was applied (lib_seq.lua)
--         -4      (with keep) the Client counts no more than keep holds: nothing given back
--                 (the number is recorded: the owner's earlier sends are refused after it)
--         a WRONGTYPE error (nothing written, nobody told) when the lock key is not a
--                 read-write lock, or the writers key (KEYS[4]) is not a zset
-- Releasing the write hold while holding read holds leaves the lock in read mode (a
-- downgrade). Giving back a hold also drops the holds whose lease has ended, and sets the
-- lock's expiry to the longest lease still in force. Runs with allow-oom: giving a lock back
-- must work on a full server.
-- A plain lock's fast form (lib_fast.lua; docs/DESIGN.md section 5) is another kind of lock,
-- as its full form is (WRONGTYPE); one whose <seq> the fence records as spent is a ghost, a
-- free lock: it is deleted, and the answer is as on no lock (0 with the record, else -1). A
-- string '~<owner> <seq>' (the fast grant's SET) is the same form, as a hash with that token
-- field alone.
--#include lib_refusal
--#include lib_publish
--#include lib_seq
--#include lib_ghost
local lock, record, leases, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, req, kind, wchan, rchan = ARGV[1], ARGV[2], ARGV[5], ARGV[6], ARGV[7]

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end

local mode = redis.pcall('hget', lock, 'mode') if type(mode) == 'table' and mode.err and string.sub(mode.err, 1, 10) ~= 'WRONGTYPE ' then error(mode) end
local isGhost = false
if type(mode) == 'table' then
  -- Not a hash: a plain lock's fast form written as a string is read as its hash form.
  local v = fastString(lock)
  if not v then
    return mode -- a user's string: HGET's error
  end
  isGhost = ghost(lock, KEYS[5], v)
  mode = false
  if not isGhost then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
elseif not mode and redis.call('exists', lock) == 1 then
  isGhost = ghost(lock, KEYS[5])
  if not isGhost then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
end
-- The writers key is written only on some paths (a write hold's end, with a readers' channel),
-- but a key of another type there is refused on every one, before anything is written: the
-- name is not a read-write lock's alone.
local wtype = redis.call('type', writers).ok
if wtype ~= 'zset' and wtype ~= 'none' then
  return redis.error_reply('WRONGTYPE the writers key holds a ' .. wtype .. ', not a read-write lock\'s claims')
end
if isGhost then
  redis.call('del', lock) -- a free lock: the answer follows as on no lock
end
local f = owner
if kind == 'r' then
  f = 'r:' .. owner
end
local holds = mode and redis.call('hget', lock, f)
local s = holds and redis.call('zscore', leases, f)
if holds and tonumber(s or '0') <= now then
  holds = nil -- its lease ended: it is gone, though nobody has dropped it yet
end
if not holds then
  if redis.call('exists', record) == 1 then
    return 0
  end
  return -1
end
local lastReq = redis.call('hget', lock, 'q:' .. f)
local last, mine = seqLast(owner, lastReq, req)
if last == req then
  return tonumber(holds)
end
if superseded(req, last) then
  return -3 -- the owner's later operation was applied (lib_seq.lua): nothing written
end
local keep = tonumber(ARGV[8])
if keep and tonumber(mine or holds) <= keep then
  -- Nothing to give back; the number is recorded all the same (see release.lua).
  redis.call('hset', lock, 'q:' .. f, (seqPut(owner, lastReq, req, 0, holds)))
  return -4
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, f, -1)
  redis.call('hset', lock, 'q:' .. f, (seqPut(owner, lastReq, req, -1, holds)))
  return holds
end

-- The last hold of this kind. Everything is read, and the waiters told, before anything is
-- written (the waiters read the message only after this script), and the first writes (the
-- release's record, the hold's lease and fields) are taken back if one of them is refused (an
-- ACL that lacks it), so that a refused call fails the release before it changes anything.
-- The holds whose lease ended go too: the writer's among them ends the write hold.
local writer = redis.call('hget', lock, 'writer')
local dead = redis.call('zrangebyscore', leases, '-inf', ms(now))
local writerGone = kind == 'w'
for _, d in ipairs(dead) do
  if d == writer then
    writerGone = true
  end
end
-- The longest lease left: the last of the two longest that is not f's (the others have ended).
local top = redis.call('zrange', leases, -2, -1, 'withscores')
local longest = nil
for i = 1, #top, 2 do
  if top[i] ~= f and tonumber(top[i + 1]) > now then
    longest = tonumber(top[i + 1])
  end
end
local free = longest == nil
-- Readers wait only while a write hold (or a writer's live claim) keeps them out; writers, for
-- the lock to be free.
if writerGone and rchan ~= '' then
  local claims = redis.call('zrangebyscore', writers, '(' .. ms(now), '+inf', 'limit', 0, 1)
  if #claims == 0 then
    publish(rchan, '*')
  end
end
if free and wchan ~= '' then
  publish(wchan, '0')
end

-- unrelease takes the release back: the record, and the hold's fields once they were removed
-- (the hash stays meanwhile: it holds the mode).
local function unrelease(removed)
  if removed then
    redis.call('hset', lock, f, holds)
    if lastReq then
      redis.call('hset', lock, 'q:' .. f, lastReq)
    end
  end
  redis.call('del', record)
end
redis.call('set', record, '1', 'px', ARGV[4])
local r = redis.pcall('hdel', lock, f, 'q:' .. f) if refused(r) then unrelease(false) error(r) end
r = redis.pcall('zrem', leases, f) if refused(r) then unrelease(true) error(r) end
for _, d in ipairs(dead) do
  redis.call('hdel', lock, d, 'q:' .. d)
end
redis.call('zremrangebyscore', leases, '-inf', ms(now))
if writerGone then
  redis.call('hdel', lock, 'writer', 'token')
  redis.call('hset', lock, 'mode', 'read')
end
if free then
  redis.call('del', lock, leases)
else
  local ttl = ms(math.max(longest - now, 1))
  redis.call('pexpire', lock, ttl)
  redis.call('pexpire', leases, ttl)
end
if writerGone and rchan ~= '' then
  redis.call('zremrangebyscore', writers, '-inf', ms(now))
end
return 0
