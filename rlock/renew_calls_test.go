package rlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A renewal round costs Redis, per held lock in the full form, three calls of renew.lua's
// (HMGET of the owner's field and the tenure's token, PTTL, PEXPIRE) beside the round's one
// EVALSHA. Before, five: TYPE, HEXISTS, HGET, PTTL, PEXPIRE (note26's "the renewal's extra
// HGET"). Counted from INFO commandstats over at least two rounds of 40 locks.
func TestMutex_renewalIsThreeCallsAHeldLock(t *testing.T) {
	t.Parallel() // its own server and Client; no time bound but the wait for two rounds
	b := realBackend(t)
	c := b.client(t, rlock.WithWatchdogTimeout(900*time.Millisecond))
	const locks = 40
	var held []*rlock.Mutex
	for i := range locks {
		m := c.Mutex(fmt.Sprintf("%s-%d", redistest.Name(t), i))
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Lock(bg)) // a re-entry: the full form, as a contended grant's
		held = append(held, m)
	}
	b.srv.ResetStats(t)
	var stats map[string]int64
	redistest.WaitFor(t, 20*time.Second, "two renewal rounds", func() bool {
		stats = b.srv.CommandStats(t)
		return stats["pexpire"] >= 2*locks
	})
	for _, m := range held {
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, m.Unlock(bg))
	}
	require.Zero(t, stats["type"]+stats["hexists"]+stats["hget"], "no TYPE, HEXISTS or HGET: %v", stats)
	require.Equal(t, stats["pexpire"], stats["hmget"], "one HMGET a renewed lock: %v", stats)
	require.Equal(t, stats["pexpire"], stats["pttl"], "one PTTL a renewed lock: %v", stats)
	require.Greater(t, stats["evalsha"], int64(0), "%v", stats)
}

// A read-write lock's renewal costs, per held lock, one read of the hold's field (HEXISTS for
// a reader, HGET for the writer), ZSCORE, ZRANGE and two PEXPIREs (and a ZADD when the lease
// grows): no TYPE of the lock's two keys (two calls a lock before session 28).
func TestRWMutex_renewalReadsNoType(t *testing.T) {
	t.Parallel() // its own server and Client; no time bound but the wait for two rounds
	b := realBackend(t)
	c := b.client(t, rlock.WithWatchdogTimeout(900*time.Millisecond))
	const locks = 20
	var unlock []func() error
	for i := range locks {
		rw := c.RWMutex(fmt.Sprintf("%s-%d", redistest.Name(t), i))
		if i%2 == 0 {
			require.NoError(t, rw.RLock(bg))
			unlock = append(unlock, func() error { return rw.RUnlock(bg) })
		} else {
			require.NoError(t, rw.Lock(bg))
			unlock = append(unlock, func() error { return rw.Unlock(bg) })
		}
	}
	b.srv.ResetStats(t)
	var stats map[string]int64
	redistest.WaitFor(t, 20*time.Second, "two renewal rounds", func() bool {
		stats = b.srv.CommandStats(t)
		return stats["zrange"] >= 2*locks
	})
	for _, u := range unlock {
		require.NoError(t, u())
	}
	require.Zero(t, stats["type"], "no TYPE: %v", stats)
	require.Equal(t, stats["zrange"], stats["hexists"]+stats["hget"], "one read of the hold's field a renewed lock: %v", stats)
	require.Equal(t, stats["zrange"], stats["zscore"], "one ZSCORE a renewed lock: %v", stats)
	require.Equal(t, 2*stats["zrange"], stats["pexpire"], "two PEXPIREs a renewed lock: %v", stats)
}
