#!lua flags=allow-oom
-- fast_release: give back the one hold of a lock that a handle owner's fast grant took and
-- that is still in the fast form (lib_fast.lua), in three server calls (EVALSHA, GET, DEL; a
-- string, as the transaction wrote it: nobody waits on it, a waiter's refusal makes it a
-- hash to mark it), or HMGET and DEL (and PUBLISH when marked) on its hash form.
-- KEYS[1] = lock hash (see acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = the fast grant's sequence number (the lock's token field is '~' .. ARGV[1] ..
--           ' ' .. ARGV[2] while the grant is in that form)
-- ARGV[3] = release channel, published when a waiter marked the lock (field w, see
--           acquire.lua) ('' publishes nothing)
-- returns 0   the hold was given back: the lock is free (and the channel told if marked)
--         -1  the lock is not held (its lease ran out, or a force took it)
--         -5  the lock is held otherwise (converted to the full form, another owner's, or
--             with a field of the owner's, which rules over the fast form):
--             nothing written; the Client gives the hold back with release.lua
-- It writes no sequence number: it frees the lock, and the owner's numbers then live only in
-- the fence's spent records (lib_spent.lua), as after release.lua. A replay of it is sent as
-- release.lua's replay, which finds the hold gone (-2) or answers from the state.
-- Runs with allow-oom: giving a lock back must work on a full server.
local lock = KEYS[1]
-- The transaction writes a string (lib_fast.lua); another script may have made it a hash.
local v = redis.pcall('get', lock) if type(v) == 'table' and v.err and string.sub(v.err, 1, 10) ~= 'WRONGTYPE ' then error(v) end
if v == false then
  return -1
end
if type(v) == 'string' then
  if v ~= '~' .. ARGV[1] .. ' ' .. ARGV[2] then
    return -5
  end
  redis.call('del', lock)
  return 0
end
local got = redis.call('hmget', lock, 'token', 'w', ARGV[1])
if not got[1] then
  return -1
end
if got[1] ~= '~' .. ARGV[1] .. ' ' .. ARGV[2] or got[3] then
  -- (A field of the owner's rules over the fast form: release.lua counts it.)
  return -5
end
-- The waiters are told before the lock goes (as release.lua), so that a refused PUBLISH fails
-- the release before it changes anything.
if got[2] then
--#include lib_publish
  publish(ARGV[3], '0')
end
redis.call('del', lock)
return 0
