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
