-- renew: extend the leases of many held locks in one call (all keys in one slot on Cluster).
-- KEYS[i] = lock hash i
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[1+i] = owner id for KEYS[i]
-- ARGV[1+n+i] (optional; n = #KEYS) = the fencing token of the tenure renewed in KEYS[i], or
--           '~<owner> <seq>' for a handle owner's tenure in the fast form (lib_fast.lua: only
--           that very grant's form counts as held, not another of the owner's, such as a ghost
--           a late transaction of the owner's left), or '' (nothing named): a hold counts as
--           held only while the lock's tenure is that one (field token): the owner's field
--           alone does not tell a tenure begun afresh since this Client's was lost (by another
--           Client for a shared context owner id, or by the owner's own send whose answer
--           never came, applied on a deleted key) from its own. rlock names every tenure.
-- A lock held by a handle's owner's fast grant (lib_fast.lua: a string '~<owner> <seq>', or a
-- hash with that token field and no field of the owner) counts as held when it is the form
-- ARGV[1+n+i] names; the renewal leaves it in that form. A tenure in the fast form that the
-- owner's re-entry converted meanwhile (the owner's field present) is held as any.
-- returns an array with one entry per key: 1 renewed, 0 the owner no longer holds it
-- A held lock in the full form costs HMGET, PTTL and PEXPIRE (it cost TYPE, HEXISTS, HGET,
-- PTTL and PEXPIRE before session 27), all commands a full (noeviction) server still
-- accepts; the fast form's string GET instead of the hash's fields.
local lease, n = ARGV[1], #KEYS
local out = {}
for i, lock in ipairs(KEYS) do
  local token = ARGV[1 + n + i]
  local owner = ARGV[i + 1]
  local fast = token and string.byte(token) == 126 -- '~': the tenure's fast form
  local held
  -- The owner's field and the tenure's token in one read; a missing key reads as neither.
  local f = redis.pcall('hmget', lock, owner, 'token') if type(f) == 'table' and f.err and string.sub(f.err, 1, 10) ~= 'WRONGTYPE ' then error(f) end
  if f.err then
    -- Not a hash: the fast grant's string (lib_fast.lua) is held if it is the tenure's; a key
    -- of another type is reported as gone rather than failing the whole batch (its GET's
    -- error is no token).
    held = fast and redis.pcall('get', lock) == token
  elseif not f[1] then
    -- No field of the owner: held only as the tenure's fast form (a hash with its token).
    held = fast and f[2] == token
  else
    -- The owner's field: held while the tenure is the one named (a fast form converted by
    -- the owner's re-entry is its tenure: its field says it holds).
    held = fast or not token or token == '' or f[2] == token
  end
  if held then
    -- Never shorten a lease that a re-entry with a longer fixed lease set.
    if redis.call('pttl', lock) < tonumber(lease) then
      redis.call('pexpire', lock, lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
