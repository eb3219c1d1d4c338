-- lib_int: not a script; included ("--#include lib_int") by the semaphore and latch scripts.
-- isInt(v) tells whether the string v is an integer as INCRBY and DECRBY read one: an
-- optional '-', then no leading zero (but '0' itself), not '-0', within a signed 64-bit
-- integer. A counter the scripts write always is; anything else is another kind of value.
local function isInt(v)
  if not (string.match(v, '^%-?[1-9]%d*$') or v == '0') then
    return false
  end
  local digits = string.gsub(v, '^%-', '')
  if #digits < 19 then
    return true
  end
  if #digits > 19 then
    return false
  end
  if string.byte(v) == 45 then -- '-'
    return digits <= '9223372036854775808'
  end
  return digits <= '9223372036854775807'
end
