package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestForceUnlock_changedBeforeTheForce_everyKind: for every kind force-unlock frees, the
// lock shown is freed and taken again (by another owner, by the owner shown in a new tenure,
// by another owner as another kind of primitive), or joined by a holder not shown, in the
// instant between the last read and the force (a hook of the command runs there):
// force-unlock frees nothing, leaves the new state as it was, says so and exits 4. (A name
// taken again as a read-write lock, read-held, or as a permit semaphore, was freed: the
// force of a mutex deleted any hash whose holders were not of its own kind.)
func TestForceUnlock_changedBeforeTheForce_everyKind(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	a, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer a.Close()
	b, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer b.Close()
	type step func(t *testing.T, name string) (undo func())
	ok := func(t *testing.T, err error) { t.Helper(); require.NoError(t, err) }
	mutex := func(c *rlock.Client) step {
		return func(t *testing.T, name string) func() {
			m := c.Mutex(name)
			ok(t, m.Lock(bg))
			return func() { ok(t, m.Unlock(bg)) }
		}
	}
	fair := func(c *rlock.Client) step {
		return func(t *testing.T, name string) func() {
			m := c.FairMutex(name)
			ok(t, m.Lock(bg))
			return func() { ok(t, m.Unlock(bg)) }
		}
	}
	spin := func(c *rlock.Client) step {
		return func(t *testing.T, name string) func() {
			m := c.SpinMutex(name)
			ok(t, m.Lock(bg))
			return func() { ok(t, m.Unlock(bg)) }
		}
	}
	rw := func(c *rlock.Client, write bool) step {
		return func(t *testing.T, name string) func() {
			m := c.RWMutex(name)
			lock, unlock := m.RLock, m.RUnlock
			if write {
				lock, unlock = m.Lock, m.Unlock
			}
			ok(t, lock(bg))
			return func() { ok(t, unlock(bg)) }
		}
	}
	permits := func(c *rlock.Client) step {
		return func(t *testing.T, name string) func() {
			p := c.PermitSemaphore(name)
			set, err := p.TrySetPermits(bg, 2)
			ok(t, err)
			require.True(t, set)
			pm, err := p.Acquire(bg, time.Minute)
			ok(t, err)
			return func() {
				ok(t, p.Release(bg, pm.ID))
				_, err := p.Delete(bg)
				ok(t, err)
			}
		}
	}
	// job is a context owner's mutex: the same owner, whichever Client and handle, so that
	// it can take the lock shown again, in a new tenure (a new fencing token).
	job := func(c *rlock.Client) step {
		return func(t *testing.T, name string) func() {
			ctx := rlock.WithOwner(bg, "job-1")
			m := c.Mutex(name)
			ok(t, m.Lock(ctx))
			return func() { ok(t, m.Unlock(ctx)) }
		}
	}
	for _, tc := range []struct {
		name  string
		shown step
		keep  bool // the holder shown stays (another joins it)
		then  step
	}{
		{"mutex/another owner", mutex(a), false, mutex(b)},
		{"mutex/the owner shown, again", job(a), false, job(b)},
		{"fair/another owner", fair(a), false, fair(b)},
		{"spin/another owner", spin(a), false, spin(b)},
		{"rw write/another owner", rw(a, true), false, rw(b, true)},
		{"rw read/another owner", rw(a, false), false, rw(b, false)},
		{"rw read/another reader joins", rw(a, false), true, rw(b, false)},
		{"rw read/a writer", rw(a, false), false, rw(b, true)},
		{"mutex/another kind: rw read", mutex(a), false, rw(b, false)},
		{"mutex/another kind: rw write", mutex(a), false, rw(b, true)},
		{"mutex/another kind: permits", mutex(a), false, permits(b)},
		{"rw read/another kind: mutex", rw(a, false), false, mutex(b)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := redistest.Name(t)
			undoShown := tc.shown(t, name)
			var undoThen func()
			var want rlock.Info
			testHookBeforeForce = func() {
				if !tc.keep {
					undoShown()
				}
				undoThen = tc.then(t, name)
				var err error
				want, err = b.Inspect(bg, name)
				require.NoError(t, err)
			}
			defer func() { testHookBeforeForce = nil }()
			out, errOut, code := relock(t, "", "force-unlock", "--url", url, "--yes", name)
			require.NotNil(t, undoThen, "the force was not reached: exit %d\n%s%s", code, errOut, out)
			got, err := b.Inspect(bg, name)
			require.NoError(t, err)
			require.Equal(t, want.Kind, got.Kind, "force-unlock freed what it never showed: exit %d\n%s%s", code, errOut, out)
			require.Equal(t, want.Token, got.Token)
			require.Equal(t, want.Count, got.Count)
			require.Len(t, got.Holders, len(want.Holders), "force-unlock freed a holder it never showed: exit %d\n%s%s", code, errOut, out)
			require.Equal(t, exitAborted, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Contains(t, out, "changed hands")
			require.Contains(t, out, "nothing freed")
			undoThen()
			if tc.keep {
				undoShown()
			}
		})
	}
}
