-- lib_clock: not a script; included ("--#include lib_clock") by lib_fence.lua and by the
-- acquire script's clock-token path (RedLock's instances), which takes it without the rest
-- of lib_fence: a script pays for every local function it defines, at every call.
-- The fence lives fenceTTL ms after the last fresh grant that set it from the clock
-- (lua.FenceTTL, 24 hours).
local fenceTTL = 86400000
local fenceTTLArg = tostring(fenceTTL) -- as Redis takes it: a string converts for free

-- clockToken(last, now) returns the token of a fresh grant that follows the server's clock:
-- the larger of last + 1 (last: the fence's last token, a number, 0 when none) and now (a
-- TIME reply) in microseconds, as a decimal string.
local function clockToken(last, now)
  local nowUs = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if last >= nowUs then
    return string.format('%.0f', last + 1)
  end
  return now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
end
