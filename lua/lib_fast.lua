-- lib_fast: not a script; included ("--#include lib_fast") by the scripts that read a lock
-- hash a fast grant may have written (docs/DESIGN.md section 5, "The fast form"). A handle's
-- owner's fresh grant may be a transaction, not a script: MULTI; HSETNX lock token
-- '~<owner> <seq>'; PEXPIRE lock <lease> NX; INCR fence; EXEC. Its token field then says that
-- <owner> holds one hold, that its last applied operation is <seq>, and that Redis does not
-- know the tenure's token. The owner's own count and q: fields, when present, rule over it.
-- Include lib_spent and lib_fence before it (fastSpent reads the spent records).
local fastMark = 126 -- '~': the byte that starts a fast form's token field

-- fastForm(tok) returns the owner and the sequence number of token field tok when it is a
-- fast form, else nil.
local function fastForm(tok)
  if not tok or string.byte(tok) ~= fastMark then
    return nil
  end
  return string.match(tok, '^~(%S+) (%S+)$')
end

-- fastSpent(fence, seq, nowMs) reports whether the fence records seq as spent: a fast form
-- whose number was spent was written by a transaction that lingered past its replay, for an
-- owner that has gone; it is free (a ghost), and a script that meets it deletes it.
local function fastSpent(fence, seq, nowMs)
  return (fenceSpent(fence, seq, nowMs))
end
