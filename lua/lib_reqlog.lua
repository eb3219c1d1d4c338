-- lib_reqlog: not a script; included ("--#include lib_reqlog") by the scripts that keep a
-- request log, so that a replayed request is answered instead of applied again.
-- remember(log, logx, req, answer, now, keep): records that request req was applied with
-- answer, for keep ms after now (server ms), in log (hash: request id -> answer) and logx
-- (zset: request id -> when the record may go); first drops up to 16 expired records.
local function remember(log, logx, req, answer, now, keep)
  local old = redis.call('zrangebyscore', logx, '-inf', now, 'limit', 0, 16)
  if #old > 0 then
    redis.call('hdel', log, unpack(old))
    redis.call('zrem', logx, unpack(old))
  end
  redis.call('hset', log, req, answer)
  redis.call('zadd', logx, string.format('%.0f', now + keep), req)
  redis.call('pexpire', log, keep)
  redis.call('pexpire', logx, keep)
end
