package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestForceUnlock_anotherKindUntouched: the force of a Mutex, FairMutex or SpinMutex, and
// Client.ForceUnlockSeen of an Info that showed a Mutex, find the name held as another kind
// of primitive (the one shown released, and another owner made it a read-write lock, read or
// write, or a permit semaphore): each answers an error wrapping ErrWrongType and frees
// nothing, as the read-write lock's force does with a Mutex's key. (They deleted any hash:
// the seen force freed a read-write lock's readers, whom it had never shown, as no owner
// of its own kind held it.)
func TestForceUnlock_anotherKindUntouched(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		a, c := b.client(t), b.client(t)
		others := []struct {
			kind string
			take func(t *testing.T, name string) (undo func())
		}{
			{"rw read", func(t *testing.T, name string) func() {
				rw := c.RWMutex(name)
				require.NoError(t, rw.RLock(bg))
				return func() { _ = rw.RUnlock(bg) }
			}},
			{"rw write", func(t *testing.T, name string) func() {
				rw := c.RWMutex(name)
				require.NoError(t, rw.Lock(bg))
				return func() { _ = rw.Unlock(bg) }
			}},
			{"permits", func(t *testing.T, name string) func() {
				p := c.PermitSemaphore(name)
				ok, err := p.TrySetPermits(bg, 2)
				require.NoError(t, err)
				require.True(t, ok)
				pm, err := p.Acquire(bg, time.Minute)
				require.NoError(t, err)
				return func() {
					_ = p.Release(bg, pm.ID)
					_, _ = p.Delete(bg)
				}
			}},
		}
		forces := []struct {
			name  string
			force func(name string, seen rlock.Info) (bool, error)
		}{
			{"Mutex", func(n string, _ rlock.Info) (bool, error) { return a.Mutex(n).ForceUnlock(bg) }},
			{"FairMutex", func(n string, _ rlock.Info) (bool, error) { return a.FairMutex(n).ForceUnlock(bg) }},
			{"SpinMutex", func(n string, _ rlock.Info) (bool, error) { return a.SpinMutex(n).ForceUnlock(bg) }},
			{"ForceUnlockSeen", func(_ string, seen rlock.Info) (bool, error) { return a.ForceUnlockSeen(bg, seen) }},
		}
		for _, o := range others {
			for _, f := range forces {
				what := o.kind + "/" + f.name
				name := redistest.Name(t)
				m := a.Mutex(name)
				require.NoError(t, m.Lock(bg))
				seen, err := a.Inspect(bg, name)
				require.NoError(t, err)
				require.Equal(t, rlock.KindMutex, seen.Kind)
				require.NoError(t, m.Unlock(bg))
				undo := o.take(t, name)
				before, err := a.Inspect(bg, name)
				require.NoError(t, err)
				freed, err := f.force(name, seen)
				assert.ErrorIs(t, err, rlock.ErrWrongType, what)
				assert.False(t, freed, what)
				after, err := a.Inspect(bg, name)
				require.NoError(t, err)
				assert.Equal(t, before.Kind, after.Kind, what)
				assert.Equal(t, before.Token, after.Token, what)
				assert.Equal(t, before.Count, after.Count, what)
				assert.Len(t, after.Holders, len(before.Holders), what)
				undo()
			}
		}
	})
}
