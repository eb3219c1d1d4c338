package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// IsLocked, TTL and ForceUnlock ride out a silent minority as the acquire does: each
// instance's request is bounded by the instance timeout, so that a paused server costs
// them one instance timeout, not the caller's whole ctx. (Before, each waited for every
// instance: with 1 of 3 servers paused and context.Background, IsLocked never returned;
// with a 60 s deadline it returned after 60 s.)
func TestRedLock_queriesRideOutSilentMinority(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a server")
	}
	t.Parallel() // its own servers, Clients and names; its bound (10 s) is five to ten instance timeouts
	ss := redServers(t, 3)
	// Instance timeouts far above a live local server's answer under load, far below the 10 s
	// that a call waiting for the paused server is given.
	cs := redClients(t, addrsOf(ss))
	other := redClients(t, addrsOf(ss))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(time.Second))
	o := rlock.NewRedLock(name, other, rlock.WithInstanceTimeout(2*time.Second))
	require.NoError(t, o.Lock(bg)) // the servers checked, the scripts loaded
	require.NoError(t, o.Unlock(bg))
	require.NoError(t, r.Lock(bg)) // held on all three
	settled(t, r, o)
	ss[2].Pause(t)
	defer ss[2].Resume(t)

	// within runs f in the background (its checks are assert's, safe there) and fails unless
	// it returns within 10 s (it should in about one instance timeout).
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		start := time.Now()
		go func() { defer close(done); f() }()
		select {
		case <-done:
			t.Logf("%s took %v", what, time.Since(start))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting for the paused server after 10s", what)
		}
	}
	for _, x := range []struct {
		name string
		r    *rlock.RedLock
	}{{"the holder", r}, {"another owner", o}} {
		within(x.name+": IsLocked", func() {
			locked, err := x.r.IsLocked(bg)
			assert.NoError(t, err)
			assert.True(t, locked, "held on the two live servers")
		})
		within(x.name+": TTL", func() {
			ttl, err := x.r.TTL(context.Background()) // o's owner holds nothing: asks Redis
			assert.NoError(t, err)
			assert.Greater(t, ttl, time.Duration(0))
		})
	}
	// ForceUnlock by another handle: a majority answers; the paused one's outcome is unknown.
	within("ForceUnlock", func() {
		freed, err := o.ForceUnlock(bg)
		assert.NoError(t, err)
		assert.True(t, freed)
	})
	within("IsLocked after ForceUnlock", func() {
		locked, err := o.IsLocked(bg)
		assert.NoError(t, err)
		assert.False(t, locked)
	})
	within("TTL after ForceUnlock", func() {
		ttl, err := o.TTL(bg)
		assert.NoError(t, err)
		assert.Zero(t, ttl)
	})
	// Too few answers to tell: the error names the instance timeout and wraps the unknown
	// outcome (not context.DeadlineExceeded: the caller's ctx has not ended).
	ss[1].Pause(t)
	defer ss[1].Resume(t)
	within("ForceUnlock with 2 of 3 paused", func() {
		_, err := o.ForceUnlock(bg)
		assert.ErrorIs(t, err, rlock.ErrUnknownOutcome)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "instance timeout")
		t.Log(err)
	})
}
