-- lib_fastpattern: not a script; included ("--#include lib_fastpattern") by lib_fast and by
-- the scripts that tell a plain lock's fast form (docs/DESIGN.md section 5) from a user's value
-- without lib_fast's functions (force_release, lib_ghost): two constants, which cost nothing
-- to define. fastMark is the byte that starts a fast form; fastPattern matches a fast form
-- exactly as rlock writes it: '~', a handle owner's id ('h:' and no space: only a handle's
-- owner takes fast grants), one space, a sequence number ('<client id in hex>.<n>'). A string
-- or token field that starts with '~' and is anything else is a user's value, not a lock
-- (internal/fastform.Parse reads the same).
local fastMark = 126
local fastPattern = '^~(h:%S+) (%x+%.%d+)$'
