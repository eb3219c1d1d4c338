package rlock_test

// Tests for the review's suspected RedLock items that the fixes of issue 12's review cover.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A round whose grants went to fewer than a majority gives them back; when one of those
// instances answers slowly, Lock must still return within ~returnGrace (100ms) of its ctx's
// end, as documented, leaving the give-back to the background (it used to wait for every
// give-back, up to the cleanup timeout). The holder holds on 3 of 5 (its copies on two
// servers deleted); the waiter reaches instance 3 through a proxy with 500ms a way, so
// that its round ends (~1s) before its ctx (1.5s) and the give-back there takes ~1s more.
// The bound is less what this process stalled meanwhile: it runs beside the parallel tests.
func TestReviewRedLock_giveBackBoundedByCallerCtx(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 5)
	name := redistest.Name(t)
	holder := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(30*time.Second))
	px := proxyTo(t, ss[3])
	addrs := addrsOf(ss)
	addrs[3] = px.Addr()
	waiter := redClients(t, addrs, rlock.WithWatchdogTimeout(30*time.Second))
	h := rlock.NewRedLock(name, holder)
	w := rlock.NewRedLock(name, waiter, rlock.WithInstanceTimeout(3*time.Second))

	require.NoError(t, h.Lock(bg))
	// Lock returns at a majority: no grant still on its way to the servers below.
	settled(t, h)
	ok, err := w.TryLock(bg, 0, 0) // the duplicate-server check, before the latency
	require.NoError(t, err)
	require.False(t, ok)
	ss[3].Do(t, "DEL", redKey(name))
	ss[4].Do(t, "DEL", redKey(name))
	require.NoError(t, h.Err(bg))

	px.SetLatency(500*time.Millisecond, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 1500*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	stalled := watchStalls(nil)
	err = w.Lock(ctx)
	late := time.Since(dl)
	stall := stalled(dl, time.Now())
	t.Logf("Lock returned %v after its ctx's end (the process stalled %v of it): %v", late, stall, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Less(t, late-stall, 350*time.Millisecond, "Lock outlived its ctx waiting for a give-back")

	// The give-backs finish in the background: nothing of the waiter's is left.
	px.SetLatency(0, 0)
	redistest.WaitFor(t, 10*time.Second, "the waiter's grants given back", func() bool {
		return !existsOn(t, ss[3], redKey(name)) && !existsOn(t, ss[4], redKey(name))
	})
	require.NoError(t, h.Unlock(bg))
}
