-- renew: extend the leases of many held locks in one call (all keys in one slot on Cluster).
-- KEYS[i] = lock hash i
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[1+i] = owner id for KEYS[i]
-- ARGV[1+n+i] (optional; n = #KEYS) = the fencing token of the tenure renewed in KEYS[i], or
--           '': a context owner's hold, which several Clients may share, counts as held only
--           while the lock's tenure is that one (field token): the owner's field alone does
--           not tell a tenure another Client began afresh, after this Client's was lost, from
--           its own. Without it (a handle's owner, whose holds one Client alone takes) the
--           field is enough.
-- A lock held by a handle's owner's fast grant (lib_fast.lua: token field '~<owner> <seq>',
-- no field of the owner) counts as held by that owner; the renewal leaves it in that form.
-- returns an array with one entry per key: 1 renewed, 0 the owner no longer holds it
-- Uses only TYPE, HEXISTS, HGET, PTTL and PEXPIRE, which a full (noeviction) server still
-- accepts.
local lease, n = ARGV[1], #KEYS
local out = {}
for i, lock in ipairs(KEYS) do
  local token = ARGV[1 + n + i]
  -- A key of another type is reported as gone rather than failing the whole batch.
  local owner = ARGV[i + 1]
  local held = redis.call('type', lock).ok == 'hash'
  if held and redis.call('hexists', lock, owner) == 0 then
    -- The owner's fast grant, if any: its token field starts '~<owner> '.
    local f = redis.call('hget', lock, 'token')
    held = f ~= nil and f ~= false and string.sub(f, 1, #owner + 2) == '~' .. owner .. ' '
    token = nil
  end
  if held and (not token or token == '' or redis.call('hget', lock, 'token') == token) then
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
