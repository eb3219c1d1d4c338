-- lib_ghost: not a script; included ("--#include lib_ghost") by the read-write lock's scripts
-- that meet a plain lock's fast form (lib_fast.lua) on the key they share with it: they answer
-- WRONGTYPE to a live one, as to a plain lock's hash, and take a ghost as a free lock.
-- ghost reports whether the lock hash is a plain lock's fast form (lib_fast.lua) whose <seq>
-- the fence records as spent (and whose owner has no count field of its own): a free lock.
-- Its libraries are defined only here, for the hash of another kind that pays for them.
-- str is the lock's value when it is a string fast form (the fast grant's SET: the hash form
-- with that token field alone), else nil.
local function ghost(lock, fence, str)
--#include lib_spent
--#include lib_fence
--#include lib_fast
  local fo, fseq = fastForm(str or redis.call('hget', lock, 'token'))
  return fseq ~= nil and fence ~= nil and (str or redis.call('hexists', lock, fo) == 0)
    and fastSpent(fence, fseq, serverMs())
end

--#include lib_fastpattern

-- fastString(lock) is the lock's value, after a hash read of it failed, when it is a string
-- that is a fast form (fastPattern); nil for another string (a user's, even one
-- that starts with '~'), and GET's error for a key of another type.
local function fastString(lock)
  local v = redis.call('get', lock)
  if string.match(v, fastPattern) then
    return v
  end
  return nil
end
