-- force_release: free a lock whoever holds it and wake its waiters.
-- KEYS[1] = lock hash
-- ARGV[1] = release channel
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
redis.call('publish', ARGV[1], '0')
return 1
