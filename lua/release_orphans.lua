#!lua flags=allow-oom
-- release_orphans: give back holds that Redis counts for an owner beyond the holds the owner
-- took and has not given back (orphans: re-entries granted to callers that had gone, whose
-- give-back got no answer), and never one of the owner's own.
-- KEYS[1] = lock hash (see acquire.lua)
-- ARGV[1] = owner id
-- ARGV[2] = the operation's sequence number (lib_seq.lua: the same one again is answered from
--           the state, a lower one than the owner's last applied is refused with -3)
-- ARGV[3] = keep: the holds the owner took and has not given back (>= 1)
-- ARGV[4] = the most holds to give back (the orphans the caller knows of)
-- returns the owner's hold count afterwards (0: the owner holds none: nothing written), or -3
-- It gives back min(ARGV[4], count - keep) holds: an orphan whose give-back was applied after
-- all (its replies lost) is no longer counted, so the owner's own holds stay, whatever the
-- caller believed. Runs with allow-oom: giving back must work on a full server.
--#include lib_seq
local lock, owner, seq = KEYS[1], ARGV[1], ARGV[2]
local keep, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local seqField = 'q:' .. owner
local got = redis.call('hmget', lock, owner, seqField)
local holds, last = tonumber(got[1] or '0'), seqLast(owner, got[2], seq)
if holds == 0 or last == seq then
  return holds
end
if superseded(seq, last) then
  return -3
end
local give = math.min(most, holds - keep)
if give <= 0 then
  return holds
end
holds = redis.call('hincrby', lock, owner, -give)
redis.call('hset', lock, seqField, seqPut(owner, got[2], seq))
return holds
