#!lua flags=allow-oom
-- rw_renew_read: extend the leases of many read holds in one call (all keys in one slot on
-- Cluster).
-- KEYS[2i-1] = lock hash i (see rw_acquire.lua)
-- KEYS[2i]   = its leases zset (see rw_acquire.lua)
-- ARGV[1]    = lease in milliseconds (> 0)
-- ARGV[1+i]  = owner id for lock i
-- returns an array with one entry per lock: 1 renewed, 0 the owner holds no live read hold
-- there (gone, expired, or the key holds another type)
-- A renewal never shortens a lease: the hold's lease ends at the later of its current end
-- and now + ARGV[1]; the lock and its leases then live as long as the longest lease.
-- Runs with allow-oom: a held lock must stay renewable on a full server.
-- A held lock costs HEXISTS, ZSCORE, ZRANGE, two PEXPIREs, and a ZADD when the lease grows (a
-- TYPE of both keys more before session 28: a key of another type now fails the read, which
-- reads as not held).
local lease = tonumber(ARGV[1])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function ms(x) return string.format('%.0f', x) end
--#include lib_rwextend
local out = {}
for i = 1, #ARGV - 1 do
  local lock, leases, f = KEYS[2 * i - 1], KEYS[2 * i], 'r:' .. ARGV[i + 1]
  out[i] = 0
  local s = 0
  -- A read of a key of another type fails, and reads as not held (reported gone rather than
  -- failing the whole batch); any other error (an ACL's refusal, say) fails the call.
  local h = redis.pcall('hexists', lock, f) if type(h) == 'table' and h.err and string.sub(h.err, 1, 10) ~= 'WRONGTYPE ' then error(h) end
  if h == 1 then
    local z = redis.pcall('zscore', leases, f) if type(z) == 'table' and z.err and string.sub(z.err, 1, 10) ~= 'WRONGTYPE ' then error(z) end
    if type(z) ~= 'table' then s = tonumber(z or '0') end
  end
  if s > now then
    rwExtend(lock, leases, f, s, lease)
    out[i] = 1
  end
end
return out
