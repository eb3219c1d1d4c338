-- force_release: free a lock whoever holds it and wake its waiters.
-- KEYS[1] = lock hash
-- ARGV[1] = release channel ('' publishes nothing)
-- ARGV[2] = message to publish (optional, default '0': wake one waiter per Client)
-- returns 1 if a lock was removed, 0 if there was none;
--         a WRONGTYPE error (and nothing deleted) if the key is not a hash
-- DEL and PUBLISH are accepted by a full (noeviction) server.
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. t .. ', not a lock')
end
redis.call('del', KEYS[1])
if ARGV[1] ~= '' then
  redis.call('publish', ARGV[1], ARGV[2] or '0')
end
return 1
