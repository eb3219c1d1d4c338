package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A Lock/Unlock loop with nothing held between them: a round decided as soon as a majority
// granted left the third instance's grant to arrive during the Unlock that followed, given
// back apart (a late grant), and the next round's request there waited for that give-back,
// so that the same instance ran a cycle behind, its grant late, in most cycles (issue 23's
// RedLock profile: the stagger). A won round now waits a little for the instances still
// out: a late grant given back apart is the exception.
func TestRedLock_noStaggerInAZeroHoldLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("a few hundred cycles on three servers")
	}
	t.Parallel()
	ss := redServers(t, 3)
	cs := redClients(t, addrsOf(ss))
	r := rlock.NewRedLock(redistest.Name(t), cs, rlock.WithInstanceTimeout(250*time.Millisecond))
	const cycles = 300
	for i := 0; i < cycles; i++ {
		require.NoError(t, r.Lock(bg))
		require.NoError(t, r.Unlock(bg))
	}
	settled(t, r)
	adopted, returned := rlock.RedLateGrants(r)
	t.Logf("%d cycles: %d late grants adopted, %d given back apart", cycles, adopted, returned)
	require.Less(t, returned, int64(cycles/5), "late grants given back apart: one instance a cycle behind")
}
