-- lib_refusal: not a script; included ("--#include lib_refusal") by the scripts that must take
-- back what they wrote when a later call is refused. Redis does not roll a script back: a call
-- refused for want of ACL rights fails the script, and what it wrote before stays. The scripts
-- make the calls that may be refused before they write where they can (reads first, and a
-- publish before the change it announces: subscribers read it only after the script), and
-- make the others with redis.pcall, on a line that reads
--   local r = redis.pcall('pexpire', key, ms) if refused(r) then undo() error(r) end
-- with the undo in a function of its own. Redis reports the line where a script fails (here,
-- where error raises the refusal again), and rlock names the refused command by that line
-- (lua.CommandAt): so the check, the undo and error stay on the line of the call, and the
-- line calls no other command.
-- refused(r) reports whether r, the reply of a redis.pcall, is an error.
local function refused(r)
  return type(r) == 'table' and r.err ~= nil
end
