package rlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// One name is one primitive: a Mutex, FairMutex or SpinMutex whose name is a held RWMutex's
// or a PermitSemaphore's gets ErrWrongType from TryLock and Lock at once, and writes nothing
// to the other primitive's hash. Before, the acquire scripts took that hash for a lock held
// by another owner: TryLock returned (false, nil) and Lock waited until the read-write lock
// was free, or for ever on the semaphore (helper apireview27's probe); only ForceUnlock
// refused it.
func TestMutexKinds_onAnotherPrimitivesHashAreWrongType(t *testing.T) {
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		other := b.client(t)
		lockers := map[string]func(name string) *rlock.Mutex{
			"Mutex":     c.Mutex,
			"FairMutex": func(n string) *rlock.Mutex { return c.FairMutex(n).Mutex },
			"SpinMutex": func(n string) *rlock.Mutex { return c.SpinMutex(n).Mutex },
		}
		holders := map[string]func(t *testing.T, name string) (release func()){
			"RWMutex write": func(t *testing.T, name string) func() {
				rw := other.RWMutex(name)
				require.NoError(t, rw.Lock(bg))
				return func() { require.NoError(t, rw.Unlock(bg)) }
			},
			"RWMutex read": func(t *testing.T, name string) func() {
				rw := other.RWMutex(name)
				require.NoError(t, rw.RLock(bg))
				return func() { require.NoError(t, rw.RUnlock(bg)) }
			},
			"PermitSemaphore": func(t *testing.T, name string) func() {
				ok, err := other.PermitSemaphore(name).TrySetPermits(bg, 2)
				require.NoError(t, err)
				require.True(t, ok)
				return func() {}
			},
		}
		for kind, mk := range lockers {
			for held, take := range holders {
				t.Run(fmt.Sprintf("%s on %s", kind, held), func(t *testing.T) {
					name := redistest.Name(t)
					release := take(t, name)
					m := mk(name)
					before := hashOf(t, b, m.Key())
					ok, err := m.TryLock(bg, 0, 0)
					require.ErrorIs(t, err, rlock.ErrWrongType, "TryLock")
					require.False(t, ok)
					ctx, cancel := context.WithTimeout(bg, 5*time.Second)
					defer cancel()
					require.ErrorIs(t, m.Lock(ctx), rlock.ErrWrongType, "Lock: told at once, not after waiting")
					require.NoError(t, ctx.Err(), "Lock returned before its ctx's end")
					require.Equal(t, before, hashOf(t, b, m.Key()), "the other primitive's hash is untouched")
					release()
				})
			}
		}
	})
}

// hashOf is the hash at key, field by field.
func hashOf(t *testing.T, b *backend, key string) map[string]string {
	t.Helper()
	msg, err := b.do(t, "HGETALL", key)
	require.NoError(t, err)
	m, err := msg.AsStrMap()
	require.NoError(t, err)
	return m
}
