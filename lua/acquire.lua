-- acquire: take or re-enter a reentrant lock.
-- KEYS[1] = lock hash   (field <owner> = hold count, field <owner>:r = last request id applied)
-- KEYS[2] = fence hash  (field t = last fencing token; never expires)
-- ARGV[1] = lease in milliseconds (> 0)
-- ARGV[2] = owner id
-- ARGV[3] = request id (unique per call; a replay with the same id is answered, not applied again)
-- returns {1, token, holds}  acquired (fresh, re-entered, or a replay of an applied request)
--         {0, pttl}          held by another owner; pttl is the lock's remaining lease (-1: no expiry)
local lock, fence = KEYS[1], KEYS[2]
local lease, owner, req = ARGV[1], ARGV[2], ARGV[3]
local reqField = owner .. ':r'

if redis.call('exists', lock) == 0 then
  -- Fresh grant. The token is the larger of the last token + 1 and the server's clock in
  -- microseconds, so that it keeps rising even when the fence was lost (a restart without
  -- persistence, a failover to a replica that lacked it), as long as the server's clock does
  -- not run backwards. The fence is written first: if it holds a value of another type the
  -- script fails here, before the lock key is touched.
  local now = redis.call('time')
  local token = math.max(tonumber(redis.call('hget', fence, 't') or '0') + 1,
    tonumber(now[1]) * 1000000 + tonumber(now[2]))
  token = string.format('%.0f', token)
  redis.call('hset', fence, 't', token)
  token = tonumber(token)
  redis.call('hset', lock, owner, 1, reqField, req)
  redis.call('pexpire', lock, lease)
  return {1, token, 1}
end

local holds = redis.call('hget', lock, owner)
if not holds then
  return {0, redis.call('pttl', lock)}
end

-- While this owner holds the lock nobody else can have been granted it, so the fence's
-- current value is this owner's token.
local token = tonumber(redis.call('hget', fence, 't') or '0')
if redis.call('hget', lock, reqField) == req then
  return {1, token, tonumber(holds)}
end
holds = redis.call('hincrby', lock, owner, 1)
redis.call('hset', lock, reqField, req)
-- Re-entry never shortens the lease it finds.
if redis.call('pttl', lock) < tonumber(lease) then
  redis.call('pexpire', lock, lease)
end
return {1, token, holds}
