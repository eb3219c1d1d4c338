package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// replyGate holds back the reply of the next call of one script through a Client once armed:
// the script runs in Redis at once (sent is closed then), its reply reaches the caller once
// open is closed.
type replyGate struct {
	script     string
	armed      atomic.Bool
	sent, open chan struct{}
}

func newReplyGate(script string) *replyGate {
	return &replyGate{script: script, sent: make(chan struct{}), open: make(chan struct{})}
}

// gatedRedLockClients starts 3 servers and returns them with a Client on each (watchdog
// timeout lease), whose scripts go through the gates given for its index.
func gatedRedLockClients(t *testing.T, lease time.Duration, gates map[int][]*replyGate) ([]*redistest.Server, []*rlock.Client) {
	ss := redServers(t, 3)
	cs := make([]*rlock.Client, len(ss))
	for i, s := range ss {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		hc := &hookClient{Client: rc}
		gs := gates[i]
		hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.multi {
				return call()
			}
			for _, g := range gs {
				if cmd.script == g.script && g.armed.CompareAndSwap(true, false) {
					res := cmd.sendWith(context.WithoutCancel(ctx))
					close(g.sent)
					<-g.open
					return res
				}
			}
			return call()
		})
		c, err := rlock.New(hc, rlock.WithWatchdogTimeout(lease))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		hardWarm(t, c)
		cs[i] = c
	}
	return ss, cs
}

// A re-entry's grant that reaches its round after the decision is adopted only while the
// instance counts fewer holds than the RedLock: found by TestRedOrphanHunt (seed
// 1796454186684538365 trial 4, "A instance 0: Redis 2, RedLock 2 (followed true, k 1)"; seed
// 1796454374823080430 trial 19 for the Unlock in flight). Instance 0's re-entry reply is held
// back; the round is won by the other two; the owner Unlocks the re-entry (instances 1 and 2
// give one back, instance 0 counts one hold) and the late grant comes, within the instance
// timeout, after that Unlock returned (after) or while it waits for instance 1's answer
// (during: the RedLock's count was taken down only after the give-backs were answered, so
// the instance's one hold looked short of the RedLock's two). Adopted, instance 0 counted two
// holds for the RedLock's one, renewed until the owner's last Unlock: no renewal settled it
// (it was no orphan of the instance's Client), and each later Unlock of a re-entry kept it
// (one back on every instance that counts more than one). It is given back instead.
func TestRedLock_lateReentryGrantAfterItsUnlockIsGivenBack(t *testing.T) {
	for _, when := range []string{"after", "during"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			const lease = 900 * time.Millisecond // renewals every 600 ms
			acq0, rel1 := newReplyGate("acquire"), newReplyGate("release")
			ss, cs := gatedRedLockClients(t, lease, map[int][]*replyGate{0: {acq0}, 1: {rel1}})
			name := redistest.Name(t)
			key := redKey(name)
			r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(500*time.Millisecond))
			lockOnAll(t, r, cs, 1)
			adopted0, returned0 := rlock.RedLateGrants(r)
			late := func() int64 {
				adopted, returned := rlock.RedLateGrants(r)
				return adopted - adopted0 + returned - returned0
			}

			acq0.armed.Store(true)
			require.NoError(t, r.Lock(bg), "the re-entry: instances 1 and 2 grant it")
			<-acq0.sent
			if when == "after" {
				require.NoError(t, r.Unlock(bg), "the re-entry's Unlock")
				close(acq0.open) // instance 0's grant reaches the round now, within its instance timeout
			} else {
				rel1.armed.Store(true)
				unlocked := make(chan error, 1)
				go func() { unlocked <- r.Unlock(bg) }()
				<-rel1.sent // the Unlock waits for instance 1's answer
				close(acq0.open)
				redistest.WaitFor(t, 5*time.Second, "instance 0's late grant settled", func() bool { return late() == 1 })
				close(rel1.open)
				require.NoError(t, <-unlocked, "the re-entry's Unlock")
			}
			settled(t, r)
			idle(r, cs)
			require.Equal(t, int64(1), late(), "precondition: instance 0's grant reached the round late")
			n, _ := rlock.RedInstanceHolds(r, bg)
			adopted, returned := rlock.RedLateGrants(r)
			t.Logf("the RedLock counts %d, %d, %d holds on the instances (late grants adopted %d, given back %d)",
				n[cs[0]], n[cs[1]], n[cs[2]], adopted-adopted0, returned-returned0)

			// Within a renewal period and a little, every instance counts the RedLock's one hold.
			redistest.WaitFor(t, lease, "instance 0 to count the RedLock's one hold", func() bool {
				return ownerHoldsOn(t, ss[0], key) == 1
			})
			for i := range ss {
				require.Equal(t, 1, ownerHoldsOn(t, ss[i], key), "server %d", i)
			}
			require.NoError(t, r.Unlock(bg), "the last Unlock")
			settled(t, r)
			redistest.WaitFor(t, lease, "released everywhere", func() bool { return holdersOn(t, ss, key) == 0 })
			require.ErrorIs(t, r.Unlock(bg), rlock.ErrNotHeld)
		})
	}
}
