-- force_release: free a lock whoever holds it and wake its waiters.
-- KEYS[1] = lock hash
-- KEYS[2] = (optional) the lock's forced record (hash: owner id -> fencing token of the tenure
--           taken from it), read by a replayed release (release.lua) to tell a hold given back
--           from one forced away before the release arrived
-- KEYS[3] = (optional, with KEYS[2]) the lock's fence (lib_fence.lua): read only when the lock
--           is in the fast form, to tell a ghost
-- ARGV[1] = release channel ('' publishes nothing)
-- ARGV[2] = message to publish (optional, default '0': wake one waiter per Client)
-- ARGV[3] = with KEYS[2]: how long the record outlives the lease it ends, in milliseconds
--           (the longest a holder may still replay a release of it); '0' without KEYS[2]
-- ARGV[4] = (optional) the tenure the caller saw: '' or absent frees whoever holds the lock;
--           otherwise the fencing token seen ('0': none), and the lock is freed only if no
--           owner holds it, or its token is this one and every owner holding it is among
--           ARGV[5...]
-- ARGV[5...] = with ARGV[4]: the owner ids seen holding the lock
-- returns 1 if a lock was removed, 0 if there was none;
--         -1 (and nothing changed) if ARGV[4] is given and the lock is held by an owner not
--         seen, or under another token;
--         a WRONGTYPE error (and nothing deleted) if the key is not a hash (nor a string
--         fast form, below), or is another
--         kind's hash (a read-write lock's, with a 'mode' field; a permit semaphore's, with
--         'permits')
-- The fast form (lib_fast.lua; docs/DESIGN.md section 5): a token field '~<owner> <seq>'
-- says that <owner> holds one hold, unless its own count field says otherwise; a string
-- '~<owner> <seq>' (the fast grant's SET) is the same form, as a hash with that token field
-- alone. It is freed like any held lock; its token, as seen (ARGV[4]) and as recorded for <owner> in the forced
-- record, is the token field's content, '~<owner> <seq>' (rlock's Inspect reports Token 0
-- for it and keeps that text for ForceUnlockSeen; a seen '0' does not match it, so a fast
-- tenure begun since, the same owner's included, is never freed as seen). A fast form whose
-- <seq> the fence (KEYS[3]) records as spent is a ghost (a free lock): it is deleted, its
-- waiters (field w) are told, nothing is recorded, and the answer is 0, as for no lock.
-- DEL and PUBLISH are accepted by a full (noeviction) server; the record is not written there.
-- The waiters are told, and the lock deleted, before the record is written, so that a refused
-- PUBLISH or DEL (an ACL without it) fails the script before it changes anything; a record
-- whose expiry is refused is taken back, as one that could not be written.
--#include lib_refusal
--#include lib_publish
--#include lib_fastpattern

-- ghost(tok) reports whether token field tok is a fast form that the fence records as spent.
-- The libraries are defined only here: only a fast form pays for them.
local function ghost(tok)
--#include lib_spent
--#include lib_fence
--#include lib_fast
  local _, seq = fastForm(tok)
  return seq ~= nil and KEYS[3] ~= nil and fastSpent(KEYS[3], seq, serverMs())
end

local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
local fields
if t == 'string' then
  -- A fast form written as a string by the fast grant's SET (lib_fast.lua's fastHash): read
  -- as its hash form, whose only field is the token. It is not converted: the force only
  -- deletes it, which a full server accepts (a conversion's HSET it refuses).
  local v = redis.call('get', KEYS[1])
  if string.match(v, fastPattern) then
    fields = {'token', v}
  end
end
if not fields then
  if t ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a lock')
  end
  fields = redis.call('hgetall', KEYS[1])
end
local token, owners, has, w = '0', {}, {}, false
for i = 1, #fields, 2 do
  local f = fields[i]
  local p = string.sub(f, 1, 2)
  if f == 'token' then
    token = fields[i + 1]
  elseif f == 'w' then
    w = true
  elseif p == 'h:' or p == 'u:' then
    owners[#owners + 1] = f
    has[f] = true
  elseif f == 'mode' or f == 'permits' then
    -- A read-write lock's hash (rw_acquire.lua) or a permit semaphore's (psem_set.lua): the
    -- name is another primitive's, whose holds are not this lock's to free.
    return redis.error_reply('WRONGTYPE the key holds another kind of primitive, not a lock')
  end
end
if string.byte(token) == fastMark then
  -- The fast form: its owner holds one hold, unless its own count field is there to say so.
  local fo = string.match(token, fastPattern)
  if fo and not has[fo] then
    if ghost(token) then
      if w then
        publish(ARGV[1], ARGV[2] or '0')
      end
      redis.call('del', KEYS[1])
      return 0
    end
    owners[#owners + 1] = fo
  end
end
if ARGV[4] and ARGV[4] ~= '' and #owners > 0 then
  if token ~= ARGV[4] then
    return -1
  end
  local seen = {}
  for i = 5, #ARGV do
    seen[ARGV[i]] = true
  end
  for _, o in ipairs(owners) do
    if not seen[o] then
      return -1
    end
  end
end
local rt = KEYS[2] and redis.call('type', KEYS[2]).ok
-- The record to write (owner, token, ...; nil for none) and how long to keep it.
local record, keep = nil, 0
if rt == 'hash' or rt == 'none' then
  if #owners > 0 then
    record = {}
    for _, o in ipairs(owners) do
      record[#record + 1] = o
      record[#record + 1] = token
    end
    keep = redis.call('pttl', KEYS[1])
    if keep < 0 then
      keep = 0
    end
    keep = keep + tonumber(ARGV[3])
  end
end
if ARGV[1] ~= '' then
  publish(ARGV[1], ARGV[2] or '0')
end
redis.call('del', KEYS[1])
if record then
  -- On a full server the record cannot be written: the force goes on without it.
  local r = redis.pcall('hset', KEYS[2], unpack(record))
  if not refused(r) and redis.call('pttl', KEYS[2]) < keep then
    r = redis.pcall('pexpire', KEYS[2], keep)
    if refused(r) then
      redis.call('hdel', KEYS[2], unpack(owners))
    end
  end
end
return 1
