-- renew: extend the leases of many held locks in one call (all keys in one slot on Cluster).
-- KEYS[i] = lock hash i
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[1+i] = owner id for KEYS[i]
-- returns an array with one entry per key: 1 renewed, 0 the owner no longer holds it
-- Uses only TYPE, HEXISTS, PTTL and PEXPIRE, which a full (noeviction) server still accepts.
local lease = ARGV[1]
local out = {}
for i, lock in ipairs(KEYS) do
  -- A key of another type is reported as gone rather than failing the whole batch.
  if redis.call('type', lock).ok == 'hash'
    and redis.call('hexists', lock, ARGV[i + 1]) == 1 then
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
