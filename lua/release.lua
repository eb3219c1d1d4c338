#!lua flags=allow-oom
-- release: give back one hold of a reentrant lock, optionally passing it on to a successor.
-- KEYS[1] = lock hash (see acquire.lua)
-- KEYS[2] = the lock's forced record (hash: owner id -> fencing token of the tenure that
--           force_release.lua took from that owner; it lives a while after the force); read
--           by replays only: a first send leaves it out (no successor: KEYS[1] alone) or
--           names KEYS[1] again in its place, so that every key it names exists (a Cluster
--           node serves the script while the lock's slot migrates)
-- KEYS[3] = fence (only with a successor; see acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = the operation's sequence number (see acquire.lua: the same number again is
--           answered from the state, not applied again; a lower one than the owner's last
--           applied is refused with -3, nothing written)
-- ARGV[3] = release channel, published when the last hold is given back and not passed on
--           while a waiter marked the lock (field w, see acquire.lua) ('' publishes nothing)
-- ARGV[4] = '' on the request's first send; on a replay, the fencing token of the tenure
--           whose hold it gives back ('0' when the caller does not know it)
-- ARGV[5], ARGV[6], ARGV[7] (optional) = a successor: owner id, lease in milliseconds and
--           sequence number of a waiter that the last hold passes to directly (a fresh grant, with
--           a new fencing token, and no publish unless its lease ends before the lock's did:
--           then '*' wakes every waiter, which were told the old end and would sleep past an
--           expiry of the new one, since an expiry publishes nothing); '' for none
-- ARGV[8] = (optional) keep: a give-back of a hold the Client let go of (its acquire's outcome
--           unknown, its give-back unanswered, its fixed lease over), applied only while the
--           Client counts more than keep of the owner's holds in Redis (lib_seq.lua: for a
--           context owner, this Client's count; for a handle's owner, the owner's); else -4,
--           nothing given back (the number is recorded). It never takes a hold that another
--           Client's operation took.
-- ARGV[9] = (optional, replays only) the fast form ('~<owner> <seq>', lib_fast.lua) of the
--           tenure ARGV[4] names by its token, when that tenure began as a fast grant: the
--           same tenure by the name a force records for it while it is in that form. A
--           re-entry converts the form to a hash whose token field is ARGV[4]'s token, and the
--           Client does not always learn that it did (a re-entry whose caller had gone): named
--           by its form alone, a converted tenure was taken for ended (-2) and its last hold
--           was left held for the rest of its lease (the drift hunt, CI at 928b729).
-- returns, without a successor:
--         n >= 1  holds this owner still has (the lock stays held)
--         0       the last hold was given back: the lock is free and the channel was told
--         -1      this owner holds no hold (never held, released, expired or taken)
--         -2      (replays only) this owner holds no hold, and no force took the tenure of
--                 ARGV[4] from it: the first send gave back the last hold, or the lease ran
--                 out first. The caller tells which by its own clock: a replay sent before
--                 the hold's conservative end finds it gone only if the first send freed it
--                 (the lease cannot have run out before that end; any other removal is a
--                 force, which leaves the forced record, or is outside relock).
--         -3      superseded: the owner's later operation was applied (nothing written)
--         -4      (with keep) the Client counts no more than keep holds: nothing given back
--                 (the number is recorded: the owner's earlier sends are refused after it)
--         with a successor, {n, token}: n as above, and token > 0 when the lock passed to the
--         successor (0 when it did not: then the channel was told as usual; so too when a
--         replay of the successor's acquire had spent its number: the lock is freed)
--         a WRONGTYPE error, with nothing written, when a key holds another type (or the
--         fence a string that is not a token)
-- The fast form (lib_fast.lua): a lock whose token field is '~<owner> <seq>' is read as held
-- once by <owner>, its last applied number <seq> (unless its q: field says otherwise), and a
-- replay's tenure check accepts it (the owner's numbers order it). The script does not read
-- the fence (a first send names no key that may not exist), so it takes even a ghost of the
-- owner's (a fast form whose number was spent, lib_fast.lua) for the owner's hold: giving it
-- back frees what nobody holds. The Client releases its own fast grant by fast_release.lua when it can.
-- No release record is written: an uncontended release costs three server calls, this
-- script's included (EVALSHA, HMGET, DEL), and a fourth (PUBLISH) only when a waiter is told.
-- A hand-off's token is the fence's INCR, as acquire.lua's (lib_fence.lua, defined only then).
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock, forced = KEYS[1], KEYS[2]
local owner, req, channel, tenure = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local next, nextLease, nextReq = ARGV[5], ARGV[6], ARGV[7]
if next == '' then
  next = nil
end
local keep = tonumber(ARGV[8])
local fastName = ARGV[9] -- nil or '' when the tenure did not begin in the fast form
if fastName == '' then
  fastName = nil
end
local reqField = 'q:' .. owner

-- rare returns the helpers of the paths an uncontended release does not take (a hand-off, a
-- publish, a replay's answer): defined only when one is taken.
local function rare()
--#include lib_publish
--#include lib_spent
--#include lib_fence
--#include lib_seq
--#include lib_fast
  -- reply is the script's answer n (with the successor's token, 0 if none, when a successor
  -- was named).
  local function reply(n, token)
    if next then
      return {n, token or 0}
    end
    return n
  end
  return {publish = publish, grantToken = grantToken, superseded = superseded,
    fastForm = fastForm, fastHash = fastHash,
    seqLast = seqLast, seqPut = seqPut, reply = reply,
    -- ended answers a replay whose tenure (ARGV[4]) is gone: -1 if a force took it (its
    -- record names that tenure, by its token or its fast form ARGV[9]), else -2.
    ended = function()
      local rec = redis.call('type', forced).ok == 'hash'
      rec = rec and redis.call('hget', forced, owner)
      if rec and (rec == tenure or rec == fastName) then
        return reply(-1) -- forced away before this request arrived
      end
      return reply(-2)
    end}
end

local got = redis.pcall('hmget', lock, owner, reqField, 'w') if type(got) == 'table' and got.err and string.sub(got.err, 1, 10) ~= 'WRONGTYPE ' then error(got) end
if got.err then
  -- A string: the fast grant's (lib_fast.lua), made a hash here; else the read's error.
  if not rare().fastHash(lock) then
    return got
  end
  got = redis.call('hmget', lock, owner, reqField, 'w')
end
local holds, last, waiters = got[1], got[2], got[3]
-- A context owner's field keeps a number and a count per Client (lib_seq.lua): this Client's
-- number is compared, and its count kept.
local shared = holds and string.byte(owner) == 117 and rare() -- 'u': its helpers, built once
local mine = holds
if shared then
  last, mine = shared.seqLast(owner, last, req)
end
local fastMine -- the owner holds the lock by its fast grant (lib_fast.lua)
if not holds then
  local tok = redis.call('hget', lock, 'token')
  if tok and string.byte(tok) == 126 then -- '~'
    local r = rare()
    local o, s = r.fastForm(tok)
    if o == owner then
      holds, mine, last, fastMine = '1', '1', last or s, true
    end
  end
end
if not holds then
  if tenure == '' then
    return rare().reply(-1) -- a first send: this request gave nothing back before
  end
  if next then
    -- A replay of a final release that may have passed the lock on.
    local h = redis.call('hmget', lock, 'q:' .. next, 'token')
    if h[1] and rare().seqLast(next, h[1], nextReq) == nextReq then
      return {0, tonumber(h[2] or '0')}
    end
  end
  return rare().ended()
end
if last == req then
  return rare().reply(tonumber(holds)) -- applied already: answered from the state
end
-- Only a last that may be the later is compared in full (lib_seq.lua).
if last and (#last > #req or #last == #req and last > req) and rare().superseded(req, last) then
  return rare().reply(-3) -- superseded: the owner's later operation was applied
end
local tok = tenure ~= '' and tenure ~= '0' and not fastMine and (redis.call('hget', lock, 'token') or '')
if tok and tok ~= tenure and not (string.byte(tok) == 126 and rare().fastForm(tok) == owner) then
  -- (The owner's own fast form, lib_fast.lua, is the tenure the Client names.)
  -- A replay of a give-back in a tenure that has ended (its first send gave back the last
  -- hold, or the lease ran out, or a force), reaching a tenure a grant began since: for a
  -- context owner perhaps another Client's, whose entry is the only one in the field, so no
  -- number of this Client's orders the replay. It gives nothing back there.
  return rare().ended()
end
if keep and tonumber(mine) <= keep then
  -- None of the Client's holds beyond keep: nothing to give back. The number is recorded all
  -- the same, so that a send of the owner's still on its way (an acquire whose outcome the
  -- Client gave up on) is refused when it lands, not granted past this give-back: a
  -- give-back that found nothing would otherwise be outrun by the hold it was meant for.
  redis.call('hset', lock, reqField, shared and shared.seqPut(owner, got[2], req, 0, holds) or req)
  return rare().reply(-4)
end
if tonumber(holds) > 1 then
  holds = redis.call('hincrby', lock, owner, '-1')
  redis.call('hset', lock, reqField, shared and shared.seqPut(owner, got[2], req, -1, holds) or req)
  if next then
    return {holds, 0}
  end
  return holds
end
-- The last hold.
local token
if next then
  -- A fresh grant to the successor, its token as acquire.lua computes it. The fence is
  -- written first, so that a fence of another type fails the script before the lock is
  -- touched. A successor's number that a replay of its acquire spent (its Client resolved the
  -- hand-off, of unknown outcome, as refused: this release's send lingered until after that
  -- replay) grants nothing: the lock is freed instead, not passed on. Spent numbers are kept
  -- in the fence after its token, so an INCR that succeeds finds none.
  token = redis.pcall('incr', KEYS[3])
  if type(token) ~= 'number' or token <= 1099511627776 then -- not seeded from the clock (lib_fence.lua)
    token = rare().grantToken(KEYS[3], token, nextReq)
    if token == nil then
      return redis.error_reply('WRONGTYPE ' .. KEYS[3] .. ' holds a string that is not a fencing token')
    end
  end
end
if next and token then
  -- Pass the lock on, without a publish: nobody else is told it was free. The successor was
  -- a waiter, and others may still wait: the lock is marked (see acquire.lua), so that the
  -- release that frees it publishes. Unless the successor's lease ends before the lock's
  -- would have: the other waiters sleep at most until the end they were told, and would sleep
  -- past the new one if it expired (TestMutex_handoffToShortLeaseThenExpiryWakesWaiters), so
  -- every waiter is woken ('*') to learn it, before anything is written (a refused PUBLISH
  -- fails the release first). The key is rewritten, not deleted and made again
  -- (the holder's fields go, the successor's replace them): on a Cluster slot being
  -- migrated, a script may not touch a key that does not exist, so a DEL then HSET would
  -- fail half-way, with the lock freed and not passed on.
  if tonumber(nextLease) < redis.call('pttl', lock) then
    rare().publish(channel, '*')
  end
  redis.call('hdel', lock, owner, reqField)
  if string.byte(next) == 117 then
    nextReq = nextReq .. '/1' -- a context owner's count of this Client's holds (lib_seq.lua)
  end
  redis.call('hset', lock, next, '1', 'q:' .. next, nextReq, 'token', token, 'w', '1')
  local r = redis.pcall('pexpire', lock, nextLease)
  if type(r) == 'table' and r.err then
    -- No lock without an expiry (an ACL without PEXPIRE): the hand-off is undone, and the
    -- release, already applied, is answered as one that freed the lock without passing it.
    redis.call('del', lock)
    rare().publish(channel, '0')
    return {0, 0}
  end
  return {0, tonumber(token)}
end
-- The waiters are told before the lock goes (they read the message only after this script),
-- so that a refused PUBLISH (an ACL without it) fails the release before it changes anything.
if waiters and channel ~= '' then
  rare().publish(channel, '0')
end
redis.call('del', lock)
if next then
  return {0, 0}
end
return 0
