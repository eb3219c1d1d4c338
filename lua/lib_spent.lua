-- lib_spent: not a script; included ("--#include lib_spent") by the scripts that take a
-- request id a replay resends (before lib_fence, which uses it, where both are included).
-- Spent request ids. An acquire's first send that the caller gave up on may still reach
-- Redis after its replay (rueidis spreads a client's commands over several connections, so
-- nothing orders the two): had the replay's grant been given back by then, the first send
-- would take the lock afresh for a caller that has gone (a ghost hold, until its lease
-- ends). So a replay (its request id sent as '+' .. id, see spentMark) spends its id: a
-- record of it, '/' .. id .. '/' .. until (server ms), is kept for spentKeep ms or the
-- request's lease if longer, and the script grants nothing under a spent id. The locks keep
-- the records in their fence, after the token (lib_fence.lua); the permit semaphore in its
-- hash (psem_acquire.lua). A list keeps at most spentMax records, the newest.
local spentKeep = 60000
local spentMax = 32
local spentMark = 43 -- '+': the byte that starts a replay's request id
local spentAlways = 33 -- '!': a permit acquire's resend whose caller has gone (psem_acquire.lua)
local spentFlag = 'g' -- the lock hash's field: the fence may record spent ids

-- liveSpent(rest, nowMs, req, room) returns the records of rest still live at nowMs (at most
-- spentMax - room of them, the newest), and whether req is among them.
local function liveSpent(rest, nowMs, req, room)
  local out, spent = {}, false
  for id, at in string.gmatch(rest, '/([^/]+)/(%d+)') do
    if tonumber(at) > nowMs then
      out[#out + 1] = '/' .. id .. '/' .. at
      if id == req then
        spent = true
      end
    end
  end
  return table.concat(out, '', math.max(1, #out - spentMax + room + 1)), spent
end

-- spentRecord is the record of request id req spent until server time untilMs.
local function spentRecord(req, untilMs)
  return '/' .. req .. '/' .. string.format('%.0f', untilMs)
end

-- replayOf(req) returns the request id that ARGV req names, whether it is a replay's, and
-- whether the replay's caller has gone (spentAlways: only a permit acquire sends it).
local function replayOf(req)
  local b = string.byte(req)
  if b == spentMark or b == spentAlways then
    return string.sub(req, 2), true, b == spentAlways
  end
  return req, false, false
end

-- serverMs is the server's clock in milliseconds.
local function serverMs()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

