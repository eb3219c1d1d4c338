-- lib_fast: not a script; included ("--#include lib_fast") by the scripts that read a lock
-- hash a fast grant may have written (docs/DESIGN.md section 5, "The fast form"). A handle's
-- owner's fresh grant may be a transaction, not a script: MULTI; SET lock '~<owner> <seq>' NX
-- PX <lease>; INCR fence; EXEC. The lock key is then a string, which a script that meets it
-- turns into a hash with that token field (fastHash) before it reads it. Its token field says that
-- <owner> holds one hold, that its last applied operation is <seq>, and that Redis does not
-- know the tenure's token. The owner's own count and q: fields, when present, rule over it.
-- Include lib_spent and lib_fence before it (fastSpent reads the spent records).
--#include lib_fastpattern

-- fastForm(tok) returns the owner and the sequence number of token field tok when it is a
-- fast form, else nil.
local function fastForm(tok)
  if not tok or string.byte(tok) ~= fastMark then
    return nil
  end
  return string.match(tok, fastPattern)
end

-- fastSpent(fence, seq, nowMs) reports whether the fence records seq as spent: a fast form
-- whose number was spent was written by a transaction that lingered past its replay, for an
-- owner that has gone; it is free (a ghost), and a script that meets it deletes it.
local function fastSpent(fence, seq, nowMs)
  return (fenceSpent(fence, seq, nowMs))
end

-- fastHash converts a fast form written as a string (the fast grant's transaction writes
-- SET lock '~<owner> <seq>' NX PX <lease>: SET NX fails on any key that exists, of any type,
-- and sets the expiry only on the key it makes) into the same form as a hash, its token field
-- the string, keeping its expiry, and returns true; a string that is not a fast form (a
-- user's value, even one that starts with '~') is left alone: false. Call it when the lock
-- key holds a string (a hash read answered WRONGTYPE). The hash is made under lock .. ':f' (the lock's hash tag: its slot)
-- and renamed over the lock, so that no step leaves the lock missing: on a Cluster slot being
-- migrated, a script's write to a key that does not exist is refused, and the first write is
-- the only one that can be.
local function fastHash(lock)
  local v = redis.call('get', lock)
  if not fastForm(v) then
    return false
  end
  local tmp = lock .. ':f'
  local function undo() redis.call('del', tmp) end
  local ttl = redis.call('pttl', lock)
  redis.call('hset', tmp, 'token', v)
  -- A refused PEXPIRE or RENAME (an ACL without it) takes the temporary key back: no key is
  -- left without an expiry (review19). PTTL counts from the clock, while the script reads
  -- keys at its start: a form met in the last millisecond of its lease is there with a PTTL
  -- of 0, and keeps 1 ms (before, it was given none, and held the lock for good).
  if ttl >= 0 then
    local r = redis.pcall('pexpire', tmp, math.max(ttl, 1)) if type(r) == 'table' and r.err then undo() error(r) end
  end
  local r = redis.pcall('rename', tmp, lock) if type(r) == 'table' and r.err then undo() error(r) end
  return true
end
