package rlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/watchdog"
)

// A renewal batch that mixes lease lengths must renew each lock to its own lease: one script
// sets one TTL, so the batch is split by TTL (issue 9: a batch sent the first lease's TTL for
// every key).
func TestRenewer_batchOfMixedTTLsRenewsEachToItsOwn(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	name := redistest.Name(t)
	var leases []*watchdog.Lease
	ttls := []time.Duration{time.Second, 20 * time.Second, time.Second, 40 * time.Second}
	for i, ttl := range ttls {
		m := c.Mutex(name + string(rune('a'+i)))
		keys := m.keys
		owner := c.newOwner()
		srv.Do(t, "HSET", keys.lock, owner, "1")
		srv.Do(t, "PEXPIRE", keys.lock, "100")
		h, err := c.ref(m, owner)
		require.NoError(t, err)
		defer c.unref(h)
		leases = append(leases, &watchdog.Lease{TTL: ttl, Renew: true, Data: h})
	}
	for i, err := range (renewer{c}).Renew(ctx, leases) {
		require.NoError(t, err, "lease %d", i)
	}
	for i, l := range leases {
		msg := srv.Do(t, "PTTL", l.Data.(*hold).keys.lock)
		pttl, err := msg.AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, (ttls[i] - time.Second).Milliseconds(), "lease %d renewed to its own TTL %v", i, ttls[i])
		require.LessOrEqual(t, pttl, ttls[i].Milliseconds())
	}
}

// A first send's shared deadline comes at most deadlineStep early, and never before the
// send could be made: with a cleanup timeout too short to share deadlines, each send has
// its own (issue 10 review: a 3 ms timeout gave deadlines already past).
func TestFirstSendCtx_deadline(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	for _, timeout := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 20 * time.Millisecond, 5 * time.Second} {
		c, err := New(rc, WithCleanupTimeout(timeout))
		require.NoError(t, err)
		for i := 0; i < 200; i++ {
			// The send is made between start and after: the deadline is bounded above from
			// after (from start, a stall of over 1ms inside the call, on a loaded machine,
			// failed it), below from start.
			start := time.Now()
			ctx, cancel := c.firstSendCtx(context.Background())
			after := time.Now()
			dl, ok := ctx.Deadline()
			cancel()
			require.True(t, ok)
			require.False(t, dl.After(after.Add(timeout).Add(time.Millisecond)), "timeout %v: deadline %v after the call's end plus the cleanup timeout", timeout, dl.Sub(after))
			lead := timeout - deadlineStep
			if timeout < 4*deadlineStep {
				lead = timeout - time.Millisecond
			}
			require.True(t, dl.After(start.Add(lead)), "timeout %v: deadline %v before now+%v", timeout, dl.Sub(start), lead)
		}
		require.NoError(t, c.Close())
	}
}
