-- lib_reqlog: not a script; included ("--#include lib_reqlog", after lib_refusal) by the
-- scripts that keep a request log, so that a replayed request is answered instead of applied
-- again.
-- remember(log, logx, req, answer, now, keep): records that request req was applied with
-- answer, for keep ms after now (server ms), in log (hash: request id -> answer) and logx
-- (zset: request id -> when the record may go); first drops up to 16 expired records. If a
-- call after the record's first write is refused (an ACL that lacks it), the record is taken
-- back (forget) and the script fails with the refusal (see lib_refusal.lua).
-- forget(log, logx, req) takes back the record of request req. A script that remembers a
-- request before it applies it takes the record back in the same way when the change is
-- refused, so that a refused request leaves neither a record without an expiry nor one of a
-- change that was not made.
local function forget(log, logx, req)
  redis.call('hdel', log, req)
  redis.pcall('zrem', logx, req)
end

local function remember(log, logx, req, answer, now, keep)
  local old = redis.call('zrangebyscore', logx, '-inf', now, 'limit', 0, 16)
  if #old > 0 then
    redis.call('hdel', log, unpack(old))
    redis.call('zrem', logx, unpack(old))
  end
  redis.call('hset', log, req, answer)
  local at = string.format('%.0f', now + keep)
  local r = redis.pcall('zadd', logx, at, req) if refused(r) then forget(log, logx, req) error(r) end
  r = redis.pcall('pexpire', log, keep) if refused(r) then forget(log, logx, req) error(r) end
  redis.call('pexpire', logx, keep)
end
