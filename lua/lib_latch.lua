-- lib_latch: not a script; included ("--#include lib_latch") by the latch scripts.
--#include lib_int
-- latchCount(latch, t) returns the count held at key latch, whose type is t, or nil when the
-- key holds something else than a latch's count.
local function latchCount(latch, t)
  if t ~= 'string' then
    return nil
  end
  local v = redis.call('get', latch)
  if not isInt(v) then
    return nil
  end
  return tonumber(v)
end

-- replied(record) returns the reply remembered for this request id, if it was applied.
local function replied(record)
  local done = redis.call('get', record)
  if done then
    return tonumber(done)
  end
  return nil
end
