-- acquire: take or re-enter a reentrant lock (lock protocol v2, docs/DESIGN.md).
-- KEYS[1] = lock hash: field <owner> = hold count, q:<owner> = the sequence number of the
--           owner's operation last applied (ARGV[3]; one per Client for a context owner,
--           which several Clients may share: lib_seq.lua), token = the fencing token of the
--           current tenure, w = present once a waiter was refused during this tenure (its
--           release publishes). Owner ids start with 'h:' or 'u:' (see rlock), so no owner id
--           can name another field. (A hash written before v2 may hold a field g: ignored.)
-- KEYS[2] = fence (string: the name's last fencing token, a decimal integer that INCR
--           raises, then for a while the spent sequence numbers of replays; see
--           lib_fence.lua and lua.FenceTTL)
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[2] = owner id
-- ARGV[3] = the operation's sequence number, '<client id>.<n>': a Client numbers every
--           operation it sends with a rising n, and sends one owner's operations on one lock
--           one after another. Redis applies an operation only if the owner's last applied
--           one (q:<owner>) is of another Client or has a lower n; the same number again is
--           answered from the state it finds (a replay, or a first send arriving after its
--           replay), and a lower one is refused with {0, 0}, writing nothing (a send that
--           lingered in the network past the next operation). A replay (a send after the
--           first) sends it as '+' .. number: the number is then spent, recorded in the
--           fence for a while (lib_spent.lua), so that the first send, reaching Redis after
--           the lock was freed (the replay's grant given back) or after the replay's refusal,
--           grants nothing ({0, 0}); and so is a replay answered from the state, so that a
--           later replay, sent once that grant's lease ran out (nobody recorded it: the
--           replies were lost), does not take the lock again.
-- ARGV[4] = (optional) '1' when the caller, if refused, waits on the release channel: the
--           refusal then marks the lock (field w) so that its release publishes (release.lua);
--           '2' when the caller has been waiting already: a grant marks the lock too (other
--           waiters may still wait: the release must tell them). Without a mark, a release
--           publishes nothing: nobody waits. On a full server (noeviction), where the mark
--           cannot be written, a refusal answers a pttl of at most 50 ms: the waiter polls.
-- ARGV[5] = (optional) 'c': a fresh grant's token follows the server's clock exactly
--           (max(last token + 1, TIME in microseconds), as the fair and read-write locks'),
--           for RedLock's instances, whose tokens are compared across servers
-- ARGV[6] = (optional) the token of the owner's tenure, when the Client took it by a fast
--           grant (lib_fast.lua): the lock hash then holds the fast form, which a write of
--           this script converts to the full form with this token. Without it (the script
--           answers the fast grant's own number: its replay, or the Client's resend after a
--           fast grant whose INCR gave no token), the conversion takes a fresh token.
-- ARGV[7] = (optional) 's': the fast grant's transaction that this send follows made the fence
--           (its INCR answered 1): a refusal gives it an expiry.
-- The fast form: a lock whose token field is '~<owner> <seq>' (lib_fast.lua) is held once by
-- <owner>, its last applied number <seq>, unless the fence records <seq> as spent: then it is
-- a ghost (a fast grant that lingered past its replay), which this script deletes before it
-- goes on as on a free lock.
-- returns {1, token, holds}  acquired (fresh, re-entered, or the answer to an applied
--                            operation), holds = the owner's hold count in Redis now
--         {1, token, holds, mine}  the same for a context owner ('u:'): mine = how many of
--                            the owner's holds this Client's operations took and did not
--                            give back (lib_seq.lua)
--         {0, pttl}          held by another owner; pttl is the lock's remaining lease (-1: no
--                            expiry); 0 for a refused sequence number (spent or superseded)
--         a WRONGTYPE error, with nothing written, when the lock or the fence holds another type
--         (or the fence a string that is not a fence value), or the lock is another kind's
--         hash (a read-write lock's field mode, a permit semaphore's permits)
-- A fresh grant's token is the fence's INCR; a missing fence is seeded from the server's
-- clock in microseconds and counts for a second (lib_fence.lua), so tokens keep rising when
-- it expired or was lost, and stay within a second of the clock at their grant.
-- An uncontended grant costs five server calls, this script's included (EVALSHA, EXISTS,
-- INCR, HSET, PEXPIRE); the release after it three (release.lua). The helpers of the rare
-- paths (a replay, a missing fence, spent records) are defined only when one is taken.
local lock, fence = KEYS[1], KEYS[2]
local lease, owner, seq = ARGV[1], ARGV[2], ARGV[3]
local replay = string.byte(seq) == 43 -- '+'
if replay then
  seq = string.sub(seq, 2)
end
local clock = ARGV[5] == 'c'
local seqField = 'q:' .. owner
local markRetry = 50 -- ms: how soon a waiter whose mark could not be written tries again

-- rare returns the helpers of the rare paths.
local function rare()
  local function ungrant() redis.call('del', lock) end
--#include lib_spent
--#include lib_fence
--#include lib_seq
--#include lib_fast
  return {grantToken = grantToken, spend = spend, serverMs = serverMs, superseded = superseded,
    fenceSpent = fenceSpent, fastForm = fastForm, fastSpent = fastSpent, fastHash = fastHash,
    seqLast = seqLast, seqPut = seqPut, keep = math.max(tonumber(lease), spentKeep),
    ungrant = ungrant,
    -- fenceLife gives a fence without an expiry (one a fast grant's INCR made) the life of a
    -- counter set from the clock (counterTTL). PTTL then PEXPIRE, not PEXPIRE NX (Redis 7):
    -- README promises 6.2. A refusal (an ACL without PEXPIRE) leaves it as it was.
    fenceLife = function()
      if redis.call('pttl', fence) == -1 then
        redis.pcall('pexpire', fence, counterTTL)
      end
    end,
    -- convert writes the full form of the owner's fast grant (lib_fast.lua): n holds, q as
    -- its q: field, and the tenure's token (ARGV[6]) or, unknown (nil), a fresh one. It
    -- returns the token, or else the script's answer: {0, 0} when the fence records seq as
    -- spent (the ghost is deleted), an error when the fence is not one.
    -- Without a token (the fast grant's own number answered: nobody was told of the
    -- grant), a fence that fails the script (another type, a refused write) undoes the grant
    -- first, as a fresh grant's refusal does: no hold is left that nobody was told of.
    convert = function(n, q, token)
      if not token then
        local ok, t = pcall(grantToken, fence, redis.pcall('incr', fence), seq, nil)
        if not ok or not t then
          redis.call('del', lock)
        end
        if not ok then
          return redis.error_reply(type(t) == 'table' and t.err or tostring(t))
        end
        if t == false then
          return {0, 0}
        end
        if not t then
          return redis.error_reply('WRONGTYPE ' .. fence .. ' holds a string that is not a fencing token')
        end
        token = tonumber(t)
      end
      redis.call('hset', lock, owner, n, seqField, q, 'token', string.format('%.0f', token))
      if redis.call('pttl', lock) == -1 then
        -- The transaction's commands ran one by one (a server that refused its MULTI), and
        -- its expiry was refused: no lock without one.
        local r = redis.pcall('pexpire', lock, lease) if type(r) == 'table' and r.err then ungrant() error(r) end
      end
      return token
    end}
end

-- A lock held by a fast grant (lib_fast.lua) has no field of its owner: its token field says
-- who holds it. Read only when the owner's field is absent and the token field is one.
local exists = redis.call('exists', lock) == 1
local got, fastMine, ghostW
if exists then
  local g = redis.pcall('hmget', lock, owner, seqField, 'token', 'w', 'mode', 'permits') if type(g) == 'table' and g.err and string.sub(g.err, 1, 10) ~= 'WRONGTYPE ' then error(g) end
  got = g
  if got.err then
    -- A string: the fast grant's (lib_fast.lua), made a hash here; else (a user's value)
    -- the read's error, nothing written.
    local r = rare()
    if not r.fastHash(lock) then
      if ARGV[7] == 's' then r.fenceLife() end -- see ARGV[7] below
      return got
    end
    got = redis.call('hmget', lock, owner, seqField, 'token', 'w', 'mode', 'permits')
  end
  if got[5] or got[6] then
    -- A read-write lock's hash (rw_acquire.lua) or a permit semaphore's (psem_set.lua): the
    -- name is another primitive's, as force_release.lua tells too. Nothing is written.
    if ARGV[7] == 's' then rare().fenceLife() end -- see ARGV[7] below
    return redis.error_reply('WRONGTYPE the key holds another kind of primitive, not a lock')
  end
  if got[3] and string.byte(got[3]) == 126 then -- '~'
    local r = rare()
    local o, s = r.fastForm(got[3])
    if o and not got[1] and r.fastSpent(fence, s, r.serverMs()) then
      -- A ghost: the fast grant of a number its replay spent, landed after it. Free.
      redis.call('del', lock)
      exists, ghostW = false, got[4]
    elseif o == owner then
      got[1], got[2], fastMine = got[1] or '1', got[2] or s, r
    end
  end
end

if not exists then
  -- Fresh grant. The fence is written first: if it holds a value of another type the
  -- script fails there, before the lock key is touched.
  local token, fast
  if not clock then
    -- A counter below 2^40 was not seeded from the clock (a fast grant's INCR made it): the
    -- rare path seeds it.
    token = redis.pcall('incr', fence)
    fast = type(token) == 'number' and token > 1099511627776 and not replay
  elseif not replay then
    -- A clock token (RedLock's instances), inline while the fence is absent or holds only a
    -- token (as lib_fence's grantToken does it, without defining the rare paths' helpers:
    -- that cost a RedLock's grant about 9 µs of Redis time). A fence of another type fails
    -- the script at the GET, nothing written.
--#include lib_clock
    local v = redis.call('get', fence)
    if not v or string.match(v, '^%d+$') then
      token = clockToken(tonumber(v or '0'), redis.call('time'))
      redis.call('set', fence, token, 'px', fenceTTLArg)
      fast = true
    end
  end
  if not fast then
    local r = rare()
    token = r.grantToken(fence, token, seq, replay and r.keep or nil, clock)
    if token == false then
      return {0, 0} -- a spent sequence number: it grants nothing again
    end
    if not token then
      return redis.error_reply('WRONGTYPE ' .. fence .. ' holds a string that is not a fencing token')
    end
  end
  -- A context owner's field counts this Client's hold (lib_seq.lua).
  local u = string.byte(owner) == 117
  local q = u and seq .. '/1' or seq
  if ARGV[4] == '2' or ghostW then
    redis.call('hset', lock, owner, '1', seqField, q, 'token', token, 'w', '1')
  else
    redis.call('hset', lock, owner, '1', seqField, q, 'token', token)
  end
  -- A lock without an expiry would outlive a crashed holder: if the expiry is refused (an
  -- ACL without PEXPIRE), the grant is undone and the script fails with the refusal.
  local r = redis.pcall('pexpire', lock, lease) if type(r) == 'table' and r.err then rare().ungrant() error(r) end
  if u then
    return {1, tonumber(token), 1, 1}
  end
  return {1, tonumber(token), 1}
end

local holds, last, token = got[1], got[2], tonumber(got[3] or '0')
if fastMine then
  -- The owner's fast grant: its token is the Client's (ARGV[6]), or, unknown, a fresh one
  -- taken when the form is converted (rare's convert).
  token = tonumber(ARGV[6] or '')
end

-- A context owner's field keeps a number and a count per Client (lib_seq.lua): this Client's
-- are compared and answered.
local shared = holds and string.byte(owner) == 117 and rare() -- 'u': its helpers, built once
local mine
if shared then
  last, mine = shared.seqLast(owner, last, seq)
  if not last and not replay and shared.fenceSpent(fence, seq, shared.serverMs()) then
    -- This Client's first operation on the owner's hold, which another Client's grant began:
    -- no number of this Client's orders it, so a first send that lingered past its replay's
    -- refusal (which spent its number) is refused by the spent records instead.
    return {0, 0}
  end
end
if holds and last then
  if last == seq then
    -- applied already: answered from the state (a replay spends the number: see ARGV[3])
    if fastMine then
      token = fastMine.convert('1', seq, token)
      if type(token) == 'table' then
        return token
      end
    end
    if replay then
      local r = fastMine or rare()
      r.spend(lock, fence, seq, r.serverMs(), r.keep)
    end
    if shared then
      return {1, token, tonumber(holds), mine}
    end
    return {1, token, tonumber(holds)}
  end
  -- Only a last that may be the later is compared in full (lib_seq.lua).
  if (#last > #seq or #last == #seq and last > seq) and rare().superseded(seq, last) then
    return {0, 0} -- superseded: the owner's later operation was applied
  end
end
if not holds then
  if replay then
    local r = rare()
    r.spend(lock, fence, seq, r.serverMs(), r.keep)
  end
  if ARGV[7] == 's' then
    -- The fast grant's transaction was refused here, and its INCR made the fence (it was
    -- missing): the counter gets the life of one set from the clock (lib_fence's
    -- counterTTL), so that no fence is left without an expiry; the next grant seeds it.
    rare().fenceLife()
  end
  local pttl = redis.call('pttl', lock)
  if (ARGV[4] == '1' or ARGV[4] == '2') and not got[4] then
    -- A waiter: the release of this tenure must publish. On a full server the mark cannot
    -- be written: no release will tell this waiter, so it is told to try again soon.
    local r = redis.pcall('hset', lock, 'w', '1')
    if type(r) == 'table' and r.err then
      if pttl < 0 or pttl > markRetry then
        pttl = markRetry
      end
    end
  end
  return {0, pttl}
end
if ARGV[7] == 's' then
  -- The owner's fast grant was refused by its own hold (one the Client did not know of), and
  -- its INCR made the fence: it gets the counter's life, as on a refusal.
  rare().fenceLife()
end
-- Re-entry never shortens the lease it finds. The lease comes before the count, so that a
-- refused PTTL or PEXPIRE fails the re-entry before it counts a hold.
if redis.call('pttl', lock) < tonumber(lease) then
  redis.call('pexpire', lock, lease)
end
if fastMine then
  holds = tonumber(holds) + 1
  token = fastMine.convert(holds, seq, token)
  if type(token) == 'table' then
    return token
  end
else
  holds = redis.call('hincrby', lock, owner, '1')
end
local q = seq
if shared then
  q, mine = shared.seqPut(owner, got[2], seq, 1, holds)
end
redis.call('hset', lock, seqField, q)
if replay then
  -- The order of sequence numbers refuses the first send while the owner holds the lock;
  -- the record refuses it once the lock was freed.
  local r = rare()
  r.spend(lock, fence, seq, r.serverMs(), r.keep)
end
if shared then
  return {1, token, holds, mine}
end
return {1, token, holds}
