-- psem_state: read a permit semaphore (it writes nothing).
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- ARGV[1] = a permit id whose lease to report, or '' for none
-- returns {exists, permits, acquired, left}
--         exists    1 when the semaphore exists, else 0
--         permits   the number of permits (0 when absent)
--         acquired  the permits held under a live lease
--         left      milliseconds left of ARGV[1]'s lease; -2 when it is not a live permit
local sem, leases, id = KEYS[1], KEYS[2], ARGV[1]

local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local acquired = redis.call('zcount', leases, '(' .. string.format('%.0f', now), '+inf')
local left = -2
if id ~= '' then
  local s = redis.call('zscore', leases, id)
  if s and tonumber(s) > now then
    left = tonumber(s) - now
  end
end
return {p and 1 or 0, tonumber(p or '0'), acquired, left}
