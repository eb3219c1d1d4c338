-- lib_seq: not a script; included ("--#include lib_seq") by the scripts that order an
-- owner's operations by their sequence numbers (lock protocol v2, docs/DESIGN.md). A Client
-- numbers every operation it sends '<client id>.<n>' with a rising n (rlock.Client's
-- request ids), and sends one owner's operations on one lock one after another; the lock
-- keeps the number of the owner's operation last applied.
-- superseded(seq, last) reports whether the operation numbered seq comes before last, the
-- owner's last applied one, from the same Client: a send that lingered in the network past
-- the owner's later operation, which must apply nothing. Of one Client's numbers (one
-- length of id, digits without leading zeros) the later is the longer, or of the same
-- length the greater string: only such a last is parsed.
local function superseded(seq, last)
  if not last or not (#last > #seq or #last == #seq and last > seq) then
    return false
  end
  local c1, n1 = string.match(seq, '^(.*)%.(%d+)$')
  local c2, n2 = string.match(last, '^(.*)%.(%d+)$')
  return c1 ~= nil and c1 == c2 and tonumber(n1) < tonumber(n2)
end
