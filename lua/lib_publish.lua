-- lib_publish: not a script; included ("--#include lib_publish") by the scripts that wake
-- waiters. rlock passes every channel to a script marked with the command that publishes on
-- it: its first byte is 'P' (PUBLISH, classic pub/sub) or 'S' (SPUBLISH, sharded pub/sub on a
-- Redis 7 Cluster: the message stays within the lock's shard), the channel's name follows.
-- A Client uses one command for every channel (rlock.WithPubSub); a script never sends both.
-- publish(channel, msg) sends msg on channel, a marked channel as above; '' sends nothing.
local function publish(channel, msg)
  if channel == '' then
    return
  end
  if string.byte(channel) == 83 then -- 'S'
    redis.call('spublish', string.sub(channel, 2), msg)
  else
    redis.call('publish', string.sub(channel, 2), msg)
  end
end
