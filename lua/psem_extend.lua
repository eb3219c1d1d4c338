-- psem_extend: set the lease of a live permit of a permit semaphore to end lease ms from now.
-- KEYS[1] = semaphore (hash: field permits = the number of permits)
-- KEYS[2] = leases (zset: permit id -> when its lease ends, server ms)
-- KEYS[3] = request log (hash: field 'x/' .. permit id = the request id of the permit's last
--           Extend applied, while it is remembered)
-- KEYS[4] = request log times (zset: 'x/' .. permit id -> when the record may go, server ms)
-- ARGV[1] = permit id
-- ARGV[2] = lease in milliseconds (> 0); it may shorten the lease
-- ARGV[3] = channel, told '*' (wake every waiter) when the lease was shortened, so that
--           waiters timing the old end look again
-- ARGV[4] = request id (unique per call, '<client id>.<counter>', the counter rising with
--           each call of the Client; every send of the call carries the same id)
-- ARGV[5] = how long to remember the request applied last, in milliseconds (> 0)
-- returns 1  the permit's lease now ends lease ms from now, or later: a send that is not the
--            Client's newest on the permit (a resend of the Extend applied last, or a send of
--            an earlier Extend of the same Client, reaching Redis after a later one: rueidis
--            spreads a Client's commands over several connections, and a send whose reply
--            did not come may still arrive) sets the lease only when it lengthens it: a late
--            send never shortens the lease that a later Extend set
--         0  no live permit has this id: unknown, released, or its lease ended
-- Sends of Extends of other Clients are not ordered so (their counters are not comparable),
-- nor a send reaching Redis after the record of the later Extend went (ARGV[5] ms after it
-- was applied). Every key is read before anything is written, and the record is written
-- before the lease, which a refusal takes back (see lib_refusal.lua).
--#include lib_refusal
--#include lib_reqlog
--#include lib_publish
local sem, leases, log, logx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, lease, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local req, keep = ARGV[4], tonumber(ARGV[5])

local p = redis.call('hget', sem, 'permits')
if not p and redis.call('exists', sem) == 1 then
  return redis.error_reply('WRONGTYPE the key holds a hash that is not a permit semaphore')
end
local s = redis.call('zscore', leases, id)
local rec = 'x/' .. id
local last = redis.call('hget', log, rec)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not s or tonumber(s) <= now then
  return 0
end

-- stale reports whether request r is not newer than request l, the permit's last applied:
-- the same request, or an earlier one of the same Client.
local function stale(r, l)
  if r == l then
    return true
  end
  local rc, rn = string.match(r, '^(.+)%.(%d+)$')
  local lc, ln = string.match(l, '^(.+)%.(%d+)$')
  return rc ~= nil and rc == lc and tonumber(rn) < tonumber(ln)
end

local newest = not (last and stale(req, last))
if not newest and now + lease <= tonumber(s) then
  return 1 -- it would shorten the lease a later send set: the lease lasts as long already
end
-- The key's expiry is set, and the waiters told (they read the message only after this
-- script), before the lease is written, so that a refused call (an ACL that lacks it) fails
-- the request before it changes the lease. The key exists: it holds this live lease.
if redis.call('pttl', leases) < lease then
  redis.call('pexpire', leases, lease)
end
if now + lease < tonumber(s) then
  publish(channel, '*')
end
-- unrecord takes back the record, when the lease is not written.
local function unrecord()
  forget(log, logx, rec)
end
if newest then
  remember(log, logx, rec, req, now, keep)
else
  unrecord = function() end -- a stale send keeps the newer request's record
end
local r = redis.pcall('zadd', leases, string.format('%.0f', now + lease), id) if refused(r) then unrecord() error(r) end
return 1
