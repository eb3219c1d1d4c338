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
-- Clients at once (processes that share the id: rlock.WithOwner). Its q: field then keeps, for
-- each of those Clients, its last applied number and how many of the owner's holds in Redis
-- its operations took and did not give back ('<client id>.<n>/<k>', or '<client id>.<n>'
-- when k is 0), entries separated by ' ', the most recent first, at most seqClients of them:
-- one Client's operation never hides whether another Client's was applied (a replay answered
-- from the state, not applied again), and a Client can give back the holds it let go of (an
-- acquire whose outcome it never learnt, a give-back that got no answer) without taking
-- another Client's: never beyond its own count (release.lua's keep). The counts never add up
-- to more than the owner's holds; holds no entry counts (an entry dropped for a newer one,
-- data written before the counts) are nobody's in particular, and only an ordinary release
-- gives them back. A handle's owner ('h:'), one Client's alone, keeps one number, the field's
-- whole value, and its count is the owner's.
local seqClients = 16

-- seqClient is the Client part of sequence number s ('<client id>.<n>'), or s when it has none.
local function seqClient(s)
  return string.match(s, '^(.*)%.%d+$') or s
end

-- seqSplit splits an entry of a context owner's field into its number and its count.
local function seqSplit(e)
  local s, k = string.match(e, '^(.*)/(%d+)$')
  if s then
    return s, tonumber(k)
  end
  return e, 0
end

-- seqLast returns, of v (the value of owner's q: field, nil when none), the last applied number
-- of the Client that numbered seq (nil when none) and, for a context owner, how many of the
-- owner's holds that Client counts (0 when none; nil for a handle's owner: the owner's count).
local function seqLast(owner, v, seq)
  if string.byte(owner) ~= 117 then -- not 'u': one number
    return v, nil
  end
  if v then
    local c = seqClient(seq)
    for e in string.gmatch(v, '%S+') do
      local s, k = seqSplit(e)
      if seqClient(s) == c then
        return s, k
      end
    end
  end
  return nil, 0
end

-- seqPut returns v (the value of owner's q: field, nil when none) with seq as the last
-- applied number of its Client, whose count changes by d (+1 a grant, -1 a give-back, never
-- below 0), holds being the owner's hold count afterwards; and, for a context owner, that
-- Client's count. A give-back beyond the Client's own count (a hold another Client's
-- operation took: the owner's holds are anyone's to give back) lowers the others' counts, so
-- that they never add up to more than holds.
local function seqPut(owner, v, seq, d, holds)
  if string.byte(owner) ~= 117 then
    return seq, nil
  end
  local c, mine, others, sum = seqClient(seq), 0, {}, 0
  if v then
    for e in string.gmatch(v, '%S+') do
      local s, k = seqSplit(e)
      if seqClient(s) == c then
        mine = k
      elseif #others < seqClients - 1 then
        others[#others + 1] = {s, k}
        sum = sum + k
      end
    end
  end
  mine = math.max(0, mine + d)
  local over = mine + sum - holds
  if over > 0 then
    local t = math.min(over, mine)
    mine, over = mine - t, over - t
  end
  local out = {seq}
  if mine > 0 then
    out[1] = seq .. '/' .. mine
  end
  for _, o in ipairs(others) do
    local k = o[2]
    if over > 0 then
      local t = math.min(over, k)
      k, over = k - t, over - t
    end
    if k > 0 then
      out[#out + 1] = o[1] .. '/' .. k
    else
      out[#out + 1] = o[1]
    end
  end
  return table.concat(out, ' '), mine
end

-- granted is the answer to a grant, {1, token, holds}: a context owner's also tells this
-- Client's count (mine), {1, token, holds, mine}.
local function granted(token, holds, mine)
  if mine then
    return {1, token, holds, mine}
  end
  return {1, token, holds}
end
