-- rw_acquire: take or re-enter a read hold or the write hold of a read-write lock.
-- KEYS[1] = lock hash: mode = 'write' while a write hold exists, else 'read' (its presence
--           marks the hash as a read-write lock); writer = the write holder's owner id;
--           token = the write holder's fencing token; per hold field f (<owner> for the write
--           hold, r:<owner> for the owner's read holds): f = hold count, q:f = last request
--           applied. Owner ids start with 'h:' or 'u:' (see rlock), so no owner id can name
--           another field.
-- KEYS[2] = fence (string: the last fencing token; see acquire.lua)
-- KEYS[3] = leases zset: member = a hold's field (<owner> for the write hold, r:<owner> for a
--           reader), score = the end of that hold's lease in server milliseconds
-- KEYS[4] = writers zset: waiting writers' claims, member = owner, score = end of the claim
--           (server ms). While another owner's claim is live, owners that hold nothing are
--           refused read holds (writers are preferred).
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[2] = owner id
-- ARGV[3] = request id, a sequence number (lib_seq.lua: one below the owner's last applied is
--           refused with {0, 0}; the same one is answered, not applied again); a replay
--           sends it as '+' .. id: the id is then spent (see acquire.lua and lib_fence.lua),
--           and a later first send of it neither takes a hold nor claims ({0, 0})
-- ARGV[4] = 'w' for the write hold, 'r' for a read hold
-- ARGV[5] = waiter timeout in milliseconds (> 0): how long a claim lives after its last
--           refresh, and the longest a refused reader is told to wait before trying again
-- ARGV[6] = '1': a refused writer claims (or refreshes) its place among the waiting writers;
--           '0': it claims nothing (a single attempt; always '0' for a read hold)
-- returns {1, token, holds}  acquired (fresh, re-entered, or a replay of an applied request);
--                            token is the fencing token for the write hold, 0 for a read hold;
--                            holds is the owner's hold count of that kind
--         {1, token, holds, mine}  the same for a context owner ('u:'): mine = how many of
--                            those holds this Client's operations took and did not give
--                            back (lib_seq.lua)
--         {0, ttl}           refused; ttl (>= 1) is how long the obstacle lasts at most by
--                            itself, capped at a third of the waiter timeout for a claiming
--                            writer (so that it comes back to refresh its claim), and at the
--                            waiter timeout for a reader kept out by a write hold (a write
--                            release does not wake readers while a claim is live: a dead
--                            claimant's claim ends within the waiter timeout)
--         an UPGRADE error   the owner holds read holds but not the write hold and asked for
--                            the write hold (it would wait for itself); nothing is written
--         a WRONGTYPE error  the lock key holds another type, or another kind of lock (a
--                            hash without mode), or (for the write hold) the fence holds
--                            something else than a token; nothing is written
-- Every call first drops the holds whose lease has ended (and expired claims), so that a
-- crashed holder stops blocking others at the end of its own lease.
-- A plain lock's fast form (lib_fast.lua; docs/DESIGN.md section 5: a hash whose only lock
-- field may be token = '~<owner> <seq>') is another kind of lock, as its full form is (the
-- WRONGTYPE error); one whose <seq> the fence records as spent is a ghost: it is deleted, and
-- the lock taken as free. A string '~<owner> <seq>' (the fast grant's SET) is the same form,
-- as a hash with that token field alone.
--#include lib_spent
--#include lib_fence
--#include lib_fast
--#include lib_refusal
--#include lib_seq
local lock, fence, leases, writers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, owner, kind = tonumber(ARGV[1]), ARGV[2], ARGV[4]
local req, replay = replayOf(ARGV[3])
local wt, claim = tonumber(ARGV[5]), ARGV[6] == '1'

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end

-- Reads first: a key of another type fails the script before anything is written.
local got = redis.pcall('hmget', lock, 'mode', spentFlag, 'token') if type(got) == 'table' and got.err and string.sub(got.err, 1, 10) ~= 'WRONGTYPE ' then error(got) end
if got.err then
  -- Not a hash: a plain lock's fast form written as a string (the fast grant's SET) is read
  -- as its hash form, the token field alone; another string keeps GET's or HMGET's error.
  local v = redis.call('get', lock)
  if string.byte(v) ~= fastMark then
    return got
  end
  local _, fseq = fastForm(v)
  if not (fseq and fastSpent(fence, fseq, now)) then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
  redis.call('del', lock)
  got = {false, false, false}
end
local mode = got[1]
if not mode and redis.call('exists', lock) == 1 then
  -- A ghost of a plain lock's fast grant (its owner's own count field, when there, rules
  -- over the form) is a free lock.
  local fo, fseq = fastForm(got[3])
  if not (fseq and redis.call('hexists', lock, fo) == 0 and fastSpent(fence, fseq, now)) then
    return redis.error_reply('WRONGTYPE the key holds another kind of lock, not a read-write lock')
  end
  redis.call('del', lock)
  got[2] = false
end
-- The token a fresh write grant would get (see acquire.lua), and whether the request id is
-- spent (lib_fence.lua): a writer reads the fence anyway; a reader reads it when the lock is
-- free or flagged (a fresh read grant then also learns whether to flag the lock).
local nextTok, tail, spent, flag
if kind == 'w' then
  nextTok, tail, spent = nextToken(fence, tonumber(time[1]) * 1000000 + tonumber(time[2]), req, replay and 1 or 0)
  if not nextTok then
    return redis.error_reply('WRONGTYPE ' .. fence .. ' holds a string that is not a fencing token')
  end
  flag = tail ~= '' or replay
elseif not mode or got[2] then
  spent, flag = fenceSpent(fence, req, now)
  flag = flag or replay
end
local keep = math.max(lease, spentKeep)

-- spendReplay records a replay's request id as spent, once it has been applied or refused.
local function spendReplay()
  if replay then
    spend(lock, fence, req, now, keep)
  end
end
local dead = redis.call('zrangebyscore', leases, '-inf', ms(now))
redis.call('zremrangebyscore', writers, '-inf', ms(now))

-- Drop the holds whose lease ended (a write hold without a lease, which only a hand other
-- than relock's can leave, counts as ended), and a lock with no hold left.
if not mode then
  redis.call('del', leases) -- left over, if anything, from a lock that is gone
else
  local writer = redis.call('hget', lock, 'writer')
  if writer and not redis.call('zscore', leases, writer) then
    dead[#dead + 1] = writer
  end
  for _, f in ipairs(dead) do
    redis.call('hdel', lock, f, 'q:' .. f)
    if f == writer then
      redis.call('hdel', lock, 'writer', 'token')
      redis.call('hset', lock, 'mode', 'read')
      mode = 'read'
    end
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', leases, '-inf', ms(now))
  end
  if redis.call('zcard', leases) == 0 then
    redis.call('del', lock, leases)
    mode = nil
  end
end

-- A grant is written in several calls: if one after the first write is refused (an ACL that
-- lacks it), the grant is taken back (undo), so that no lock is left without a lease or an
-- expiry, and the script fails with the refusal (see lib_refusal.lua).
local function nothing() end

-- settle makes the lock and its leases live as long as the longest lease in force; undo
-- takes back what the caller wrote if a call is refused.
local function settle(undo)
  local top = redis.pcall('zrange', leases, -1, -1, 'withscores') if refused(top) then undo() error(top) end
  local ttl = ms(math.max(tonumber(top[2]) - now, 1))
  local r = redis.pcall('pexpire', lock, ttl) if refused(r) then undo() error(r) end
  redis.call('pexpire', leases, ttl)
end

-- extend never shortens the lease in force of hold field f.
local function extend(f)
  local s = tonumber(redis.call('zscore', leases, f) or '0')
  if s < now + lease then
    redis.call('zadd', leases, ms(now + lease), f)
  end
end

-- first is the q: value of a fresh hold field: a context owner's counts this Client's hold.
local function first()
  return (seqPut(owner, nil, req, 1, 1))
end

-- reenter adds a hold to field f, or answers a replay. The lease comes before the count, so
-- that a refused call fails the re-entry before it counts a hold (what it wrote before only
-- lengthens the owner's lease, as the re-entry would have).
local function reenter(f, token)
  local got = redis.call('hmget', lock, f, 'q:' .. f)
  local last, mine = seqLast(owner, got[2], req)
  if last == req then
    spendReplay() -- answered from the state: a later replay, once this hold ended, grants nothing
    return granted(token, tonumber(got[1]), mine)
  end
  if spent or superseded(req, last) then
    return {0, 0} -- a spent request id grants nothing again
  end
  extend(f)
  settle(nothing)
  local holds = redis.call('hincrby', lock, f, 1)
  local q
  q, mine = seqPut(owner, got[2], req, 1, holds)
  redis.call('hset', lock, 'q:' .. f, q)
  spendReplay()
  return granted(token, holds, mine)
end

-- unclaim takes the owner's claim back.
local function unclaim()
  redis.call('zrem', writers, owner)
end

-- refuse answers an obstacle lasting ttl at most; a claiming writer (re)claims its place. The
-- claims' last end is read before the claim is written, and a refused expiry takes the claim
-- back.
local function refuse(ttl)
  ttl = math.max(math.floor(ttl), 1)
  spendReplay()
  if spent then
    return {0, 0} -- a spent request id does not claim
  end
  if kind == 'w' and claim then
    local top = redis.call('zrange', writers, -1, -1, 'withscores')
    local last = math.max(tonumber(top[2] or '0'), now + wt)
    redis.call('zadd', writers, ms(now + wt), owner)
    local r = redis.pcall('pexpire', writers, ms(math.max(last - now, 1))) if refused(r) then unclaim() error(r) end
    ttl = math.min(ttl, math.max(math.floor(wt / 3), 1))
  end
  return {0, ttl}
end

local function leaseEnd(f)
  return tonumber(redis.call('zscore', leases, f) or '0') - now
end

if kind == 'w' then
  local writer = mode and redis.call('hget', lock, 'writer')
  if writer == owner then
    return reenter(owner, tonumber(redis.call('hget', lock, 'token') or '0'))
  end
  if writer then
    return refuse(leaseEnd(writer))
  end
  if mode then
    if redis.call('hexists', lock, 'r:' .. owner) == 1 then
      spendReplay()
      return redis.error_reply('UPGRADE the owner holds read holds and asks for the write hold')
    end
    -- Readers hold it: at most until the longest read lease ends.
    local top = redis.call('zrange', leases, -1, -1, 'withscores')
    return refuse(tonumber(top[2]) - now)
  end
  -- Free: a fresh grant. The owner's claim goes first (a refused ZREM then writes nothing).
  if spent then
    return {0, 0} -- a spent request id grants nothing again
  end
  unclaim()
  if replay then
    tail = tail .. spentRecord(req, now + keep)
  end
  setFence(fence, nextTok, tail)
  local function ungrant()
    redis.call('del', lock, leases)
  end
  redis.call('hset', lock, 'mode', 'write', 'writer', owner, 'token', nextTok, owner, 1, 'q:' .. owner, first())
  if flag then
    redis.call('hset', lock, spentFlag, '1') -- re-entries read the fence (lib_fence.lua)
  end
  local r = redis.pcall('zadd', leases, ms(now + lease), owner) if refused(r) then ungrant() error(r) end
  settle(ungrant)
  return granted(tonumber(nextTok), 1, string.byte(owner) == 117 and 1 or nil)
end

-- A read hold.
local f = 'r:' .. owner
if mode then
  if redis.call('hexists', lock, f) == 1 then
    return reenter(f, 0) -- a reader re-enters even while writers wait
  end
  local writer = redis.call('hget', lock, 'writer')
  if writer and writer ~= owner then
    return refuse(math.min(leaseEnd(writer), wt))
  end
end
if mode ~= 'write' then
  -- A new reader gives way to a waiting writer: another owner's live claim. (mode 'write'
  -- here means the owner is the writer, who may always take read holds.)
  local top = redis.call('zrevrange', writers, 0, 1, 'withscores') -- member, score, ...
  local i = 1
  if top[1] == owner then
    i = 3
  end
  if top[i] then
    return refuse(tonumber(top[i + 1]) - now)
  end
end
if spent then
  return {0, 0} -- a spent request id grants nothing again
end
-- As for a write grant, a refused call takes this read hold back (the whole lock when it
-- made it).
local function unread()
  if mode then
    redis.call('hdel', lock, f, 'q:' .. f)
    redis.pcall('zrem', leases, f)
  else
    redis.call('del', lock, leases)
  end
end
if not mode then
  redis.call('hset', lock, 'mode', 'read')
  if flag then
    redis.call('hset', lock, spentFlag, '1') -- re-entries read the fence (lib_fence.lua)
  end
end
redis.call('hset', lock, f, 1, 'q:' .. f, first())
local r = redis.pcall('zadd', leases, ms(now + lease), f) if refused(r) then unread() error(r) end
settle(unread)
spendReplay()
return granted(0, 1, string.byte(owner) == 117 and 1 or nil)
