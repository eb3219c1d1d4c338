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

-- A context owner (an owner id that starts with 'u:') may act on one lock through several
-- Clients at once (processes that share the id: rlock.WithOwner). Its q: field then keeps the
-- last applied number of each of those Clients, '<client id>.<n>' entries separated by ' ',
-- the most recent first, at most seqClients of them: one Client's operation never hides
-- whether another Client's was applied (a replay answered from the state, not applied again).
-- A handle's owner ('h:'), one Client's alone, keeps one number, the field's whole value.
local seqClients = 16

-- seqClient is the Client part of sequence number s ('<client id>.<n>'), or s when it has none.
local function seqClient(s)
  return string.match(s, '^(.*)%.%d+$') or s
end

-- seqLast returns, of v (the value of owner's q: field, nil when none), the last applied number
-- of the Client that numbered seq (nil when none).
local function seqLast(owner, v, seq)
  if not v or string.byte(owner) ~= 117 then -- not 'u': one number
    return v
  end
  local c = seqClient(seq)
  for e in string.gmatch(v, '%S+') do
    if seqClient(e) == c then
      return e
    end
  end
  return nil
end

-- seqPut returns v (the value of owner's q: field, nil when none) with seq as the last
-- applied number of its Client.
local function seqPut(owner, v, seq)
  if not v or string.byte(owner) ~= 117 then
    return seq
  end
  local c, out = seqClient(seq), {seq}
  for e in string.gmatch(v, '%S+') do
    if #out < seqClients and seqClient(e) ~= c then
      out[#out + 1] = e
    end
  end
  return table.concat(out, ' ')
end
