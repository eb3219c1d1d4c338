-- fair_acquire: take or re-enter a fair (first come, first served) reentrant lock, or keep
-- the caller's place in its queue.
-- KEYS[1] = lock hash (as acquire.lua: field <owner> = hold count, q:<owner> = last request
--           id, token = the current holder's fencing token)
-- KEYS[2] = fence (string: the last fencing token; see acquire.lua)
-- KEYS[3] = queue zset  (member = waiting owner, score = arrival: server time in microseconds,
--           strictly rising along the queue; a refresh keeps the place)
-- KEYS[4] = alive zset  (member = waiting owner, score = server time in ms when its place
--           expires unless refreshed)
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[2] = owner id
-- ARGV[3] = request id, a sequence number (lib_seq.lua: one below the owner's last applied is
--           refused with {0, 0}; the same one is answered, not applied again); a replay
--           sends it as '+' .. id: the id is then spent (see acquire.lua and lib_fence.lua),
--           and a later first send of it neither takes the lock nor queues ({0, 0})
-- ARGV[4] = waiter timeout in milliseconds: a place lives this long after its last refresh
-- ARGV[5] = '1': a failed attempt joins the queue (or refreshes the owner's place);
--           '0': a single attempt, which never queues and never passes a waiting owner
-- ARGV[6] = heartbeat in milliseconds: the longest a queued waiter may sleep before it
--           refreshes its place
-- ARGV[7] = release channel: a new queue head that may take the lock now, or within a
--           heartbeat, is told with the message '=' .. head ('' publishes nothing)
-- returns {1, token, holds}  acquired (fresh, re-entered, or a replay of an applied request)
--         {1, token, holds, mine}  the same for a context owner ('u:'): mine = how many of the
--                            owner's holds this Client's operations took and did not give
--                            back (lib_seq.lua)
--         {0, ttl}           not acquired: when queued, how long to sleep at most before the
--                            next attempt (the holder's remaining lease if the owner heads the
--                            queue, the dead head's remaining life if the lock is free, never
--                            more than the heartbeat); with ARGV[5] = '0', the lock's
--                            remaining lease (-1: no expiry) or 0 when waiters go first
--         a WRONGTYPE error, with nothing written, when a key holds another type (or the
--           fence a string that is not a token), or the lock is another kind's hash (a
--           read-write lock's field mode, a permit semaphore's permits)
-- A dead waiter's place (alive score in the past, or no alive score) is purged first.
-- A plain lock's fast form (lib_fast.lua; docs/DESIGN.md section 5: token '~<owner> <seq>',
-- <owner> holding one hold) is held by another owner, as a full-form hash is (a fast owner is
-- a Mutex handle's, never a fair lock's); one whose <seq> the fence records as spent is a
-- ghost: it is deleted, and the lock taken as free. A string '~<owner> <seq>' (the fast
-- grant's SET) is the same form: it is made a hash with that token field first (fastHash).
--#include lib_spent
--#include lib_fence
--#include lib_fast
--#include lib_refusal
--#include lib_publish
--#include lib_seq
local lock, fence, queue, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, owner = ARGV[1], ARGV[2]
local req, replay = replayOf(ARGV[3])
local wt, join, hb, channel = tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]
local reqField = 'q:' .. owner

-- Check every key's type before writing anything (the fence's below: its GET fails on
-- another type).
local want = {'hash', nil, 'zset', 'zset'}
for _, i in ipairs({1, 3, 4}) do
  local t = redis.call('type', KEYS[i]).ok
  -- A plain lock's fast form written as a string (the fast grant's SET) becomes its hash
  -- form (lib_fast.lua's fastHash), which a waiter marks: another string stays refused.
  if i == 1 and t == 'string' and fastHash(lock) then
    t = 'hash'
  end
  if t ~= 'none' and t ~= want[i] then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. t)
  end
end

local time = redis.call('time')
local nowUs = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(nowUs / 1000)
-- The token a fresh grant would get (see acquire.lua).
local token, tail, spent = nextToken(fence, nowUs, req, replay and 1 or 0)
if not token then
  return redis.error_reply('WRONGTYPE ' .. fence .. ' holds a string that is not a fencing token')
end

local function head()
  return redis.call('zrange', queue, 0, 0)[1]
end
local head0 = head()

-- Purge the places of waiters that stopped refreshing them.
local dead = redis.call('zrangebyscore', alive, '-inf', '(' .. now)
for _, o in ipairs(dead) do
  redis.call('zrem', queue, o)
end
if #dead > 0 then
  redis.call('zremrangebyscore', alive, '-inf', '(' .. now)
end
-- A head without a life record (the keys diverged) is dead too.
local h = head()
while h and not redis.call('zscore', alive, h) do
  redis.call('zrem', queue, h)
  h = head()
end

-- drop removes the owner's place.
local function drop()
  redis.call('zrem', queue, owner)
  redis.call('zrem', alive, owner)
end

-- wake tells a new head (other than the caller, which learns from the reply) that its turn
-- may have come: the lock is free, or will be within a heartbeat (a waiter not at the head
-- sleeps a heartbeat and would sleep past it). pttl is the lock's remaining lease once this
-- script is done, when the caller knows it (nil: read it). The callers wake before they
-- write (the new head reads the message only after this script, and what they write does not
-- change the head), so that a refused PUBLISH fails the script before it changes anything.
local function wake(pttl)
  local h = head()
  if channel == '' or not h or h == head0 or h == owner then
    return
  end
  pttl = pttl or redis.call('pttl', lock)
  if pttl == -2 or (pttl >= 0 and pttl < hb) then
    publish(channel, '=' .. h)
  end
end

-- queued joins the queue (keeping an earlier place) and renews the place's life. If an
-- expiry is refused, the place is taken back (drop), and the script fails with the refusal.
local function queued()
  local ttls = {redis.call('pttl', queue), redis.call('pttl', alive)}
  if not redis.call('zscore', queue, owner) then
    local score = nowUs
    local last = redis.call('zrange', queue, -1, -1, 'withscores')
    if last[2] and tonumber(last[2]) >= score then
      score = tonumber(last[2]) + 1 -- arrivals stay ordered even if the clock steps back
    end
    redis.call('zadd', queue, string.format('%.0f', score), owner)
  end
  redis.call('zadd', alive, now + wt, owner)
  for i, k in ipairs({queue, alive}) do
    if ttls[i] < wt then
      local r = redis.pcall('pexpire', k, wt) if refused(r) then drop() error(r) end
    end
  end
end

-- spent records a replay's request id as spent (lib_fence.lua), for the lease or longer.
local function spendReplay()
  if replay then
    spend(lock, fence, req, now, math.max(tonumber(lease), spentKeep))
  end
end

-- ungrant takes a fresh grant back.
local function ungrant()
  redis.call('del', lock)
end

local got = redis.call('hmget', lock, owner, reqField, 'token', 'mode', 'permits')
if got[4] or got[5] then
  -- A read-write lock's hash (rw_acquire.lua) or a permit semaphore's (psem_set.lua): the
  -- name is another primitive's, as force_release.lua tells too. Nothing is written.
  return redis.error_reply('WRONGTYPE the key holds another kind of primitive, not a lock')
end
local holds = got[1]
local last, mine = seqLast(owner, got[2], req)
if holds then
  -- Re-entry (or the replay of an applied request): the token of this owner's grant.
  if last == req then
    drop()
    wake()
    spendReplay() -- answered from the state: a later replay, once this hold ended, grants nothing
    return granted(tonumber(got[3] or '0'), tonumber(holds), mine)
  end
  if spent or superseded(req, last) then
    return {0, 0} -- a spent request id grants nothing again
  end
  -- Re-entry never shortens the lease it finds. The lease, the place and the wake-up come
  -- before the count, so that a refused call fails the re-entry before it counts a hold.
  local pttl = redis.call('pttl', lock)
  if pttl < tonumber(lease) then
    redis.call('pexpire', lock, lease)
    pttl = tonumber(lease)
  end
  drop()
  wake(pttl)
  holds = redis.call('hincrby', lock, owner, 1)
  local q
  q, mine = seqPut(owner, got[2], req, 1, holds)
  redis.call('hset', lock, reqField, q)
  spendReplay()
  return granted(tonumber(got[3] or '0'), tonumber(holds), mine)
end
if spent then
  return {0, 0} -- a spent request id neither takes the lock nor queues
end

-- A ghost of a plain lock's fast grant is a free lock (its owner's own count field, when
-- there, rules over the form: then it is held).
local fo, fseq = fastForm(got[3])
if fseq and redis.call('hexists', lock, fo) == 0 and fastSpent(fence, fseq, now) then
  redis.call('del', lock)
end

if redis.call('exists', lock) == 1 then
  -- Held by another owner.
  spendReplay()
  local pttl = redis.call('pttl', lock)
  if not join then
    wake()
    return {0, pttl}
  end
  -- A waiter: a plain lock's release (release.lua) publishes only when the lock is marked.
  redis.call('hset', lock, 'w', '1')
  wake(pttl)
  queued()
  if head() == owner and pttl >= 0 and pttl < hb then
    return {0, pttl}
  end
  return {0, hb}
end

h = head()
if h and h ~= owner then
  -- Free, but another owner waits ahead: its turn first.
  spendReplay()
  wake()
  if join then
    queued()
  end
  local left = tonumber(redis.call('zscore', alive, h)) - now
  return {0, math.max(0, math.min(left, hb))}
end

-- Fresh grant (the queue is empty or the owner heads it). The place goes and the new head
-- is told first (the lock will have its full lease), so that a refused call fails the
-- script before the lock is written; a refused expiry takes the grant back.
drop()
wake(tonumber(lease))
if replay then
  tail = tail .. spentRecord(req, now + math.max(tonumber(lease), spentKeep))
end
setFence(fence, token, tail)
local q
q, mine = seqPut(owner, nil, req, 1, 1)
redis.call('hset', lock, owner, 1, reqField, q, 'token', token)
if tail ~= '' then
  redis.call('hset', lock, spentFlag, '1') -- re-entries read the fence (lib_fence.lua)
end
local r = redis.pcall('pexpire', lock, lease) if refused(r) then ungrant() error(r) end
return granted(tonumber(token), 1, mine)
