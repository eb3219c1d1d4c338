package rlock

import "github.com/relock-go/relock/lua"

// SpinMutex is a [Mutex] whose waiters poll instead of listening: a blocked Lock or TryLock
// tries again after a pause that starts at 2ms and doubles up to 128ms, each pause drawn at
// random from its upper half (so that contenders spread out), and never longer than the
// holder's remaining lease. Its releases publish nothing. Get one with [Client.SpinMutex].
//
// Use it where Redis pub/sub is costly or unavailable: on a large Redis Cluster, where every
// PUBLISH is broadcast to every node, or behind proxies that do not carry pub/sub. It costs
// more commands per contended acquisition than a Mutex and hands the lock over later (up to
// a pause after the release), and it serves waiters in no particular order.
//
// It is the same lock as a [Mutex] of the same name (same keys, same scripts): a SpinMutex and
// a Mutex on one name exclude each other; the Mutex's waiters are then not woken by the
// SpinMutex's releases and fall back to the holder's lease end. Everything said at [Mutex]
// about owners, reentrancy, leases, loss and fencing tokens holds for it.
type SpinMutex struct {
	*Mutex
}

// spinVariant is the Mutex with polling waiters.
var spinVariant = &variant{
	kind: "spin lock", obs: KindSpinMutex, acquire: lua.Acquire, release: lua.Release, renew: lua.Renew,
	force: lua.ForceRelease, spin: true, forced: true,
}

// SpinMutex returns a handle on the spin lock called name. It sends nothing to Redis. An
// empty name, or a nil or zero Client, makes a handle whose every method returns an error
// wrapping [ErrInvalid]. So do a nil or zero *SpinMutex's (see [Mutex] on invalid handles).
func (c *Client) SpinMutex(name string) *SpinMutex {
	return &SpinMutex{c.newMutex(name, spinVariant)}
}
