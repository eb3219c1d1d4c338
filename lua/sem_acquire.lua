-- sem_acquire: take n permits of a semaphore, all of them at once or none.
-- KEYS[1] = semaphore (string: the number of available permits; may be negative; absent = 0)
-- KEYS[2] = request log (hash: request id -> answer of an applied request)
-- KEYS[3] = request log times (zset: request id -> when the record may go, server ms)
-- ARGV[1] = n, the permits to take (> 0)
-- ARGV[2] = request id (unique per call; a replay with the same id is answered, not applied
--           again); a resend sends it as '+' .. id, or '!' .. id once its caller has gone:
--           either way a refusal is remembered too (answer 0), so that the request's first
--           send, if it reaches Redis last, takes nothing once permits are back (a caller
--           still waiting tries again under a new id)
-- ARGV[3] = how long to remember an applied request, in milliseconds (> 0)
-- returns 1  the n permits were taken (by this send, or by an earlier send of this request)
--         0  fewer than n permits are available: nothing changed (or, remembered, a resend
--            found them so)
-- Every key is read before anything is written, so a key of another type fails the script
-- before it changes anything.
--#include lib_refusal
--#include lib_reqlog
--#include lib_spent
--#include lib_int
local sem, log, logx = KEYS[1], KEYS[2], KEYS[3]
local n, keep = tonumber(ARGV[1]), tonumber(ARGV[3])
local req, replay = replayOf(ARGV[2])

local v = redis.call('get', sem)
local avail = tonumber(v or '0')
if v and not isInt(v) then -- a count is an integer as INCRBY reads it
  return redis.error_reply('WRONGTYPE the key holds a string that is not a semaphore')
end
local done = redis.call('hget', log, req)
if done then
  return tonumber(done)
end
if avail < n then
  if replay then
    -- No later attempt comes under this id: its first send, which may still be on its way
    -- (its reply was lost, not necessarily the request), must take nothing either (a best
    -- effort: a refused write, on a full server say, keeps no record).
    pcall(remember, log, logx, req, '0', serverMs(), keep)
  end
  return 0
end

local now = serverMs()
remember(log, logx, req, '1', now, keep)

local r = redis.pcall('decrby', sem, n) if refused(r) then forget(log, logx, req) error(r) end
return 1
