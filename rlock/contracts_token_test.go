package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Mutex.Token: "a number that strictly rises with every fresh grant of this lock name
// (re-entry keeps it)", whatever ended the tenure before: an Unlock, a fixed lease's end, a
// ForceUnlock. Walked over one name taken in turn by handles of the three kinds that are one
// lock (Mutex, SpinMutex, FairMutex: "the same lock"), on two Clients, a handle taking it
// several times in a row (a Mutex's later fresh grants go as fast grants), and over an
// RWMutex's write side.
func TestContracts_tokenRisesAcrossKindsAndEnds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	type tokener interface {
		contractLock
		Token(ctx context.Context) (int64, error)
	}
	c1, c2 := b.client(t), b.client(t)
	for _, rw := range []bool{false, true} {
		name := redistest.Name(t) + map[bool]string{false: "-mutexes", true: "-rw"}[rw]
		var handles []tokener
		for _, c := range []*rlock.Client{c1, c2} {
			if rw {
				handles = append(handles, c.RWMutex(name), c.RWMutex(name))
			} else {
				handles = append(handles, c.Mutex(name), c.SpinMutex(name), c.FairMutex(name))
			}
		}
		// The fixed lease must outlast a grant, two Token reads and a re-entry on a loaded
		// machine: 50ms ran out before the first Unlock once under two explorers' load.
		const lease = 250 * time.Millisecond
		var last int64
		for i := 0; i < 24; i++ {
			l := handles[(i/3)%len(handles)] // each handle three times in a row
			end := i % 4
			if end == 1 {
				require.NoError(t, l.LockLease(bg, lease))
			} else {
				require.NoError(t, l.Lock(bg))
			}
			tok, err := l.Token(bg)
			require.NoError(t, err)
			require.Greater(t, tok, last, "grant %d (%T): the token did not rise", i, l)
			last = tok
			if end == 1 {
				require.NoError(t, l.LockLease(bg, lease))
			} else {
				require.NoError(t, l.Lock(bg))
			}
			again, err := l.Token(bg)
			require.NoError(t, err)
			require.Equal(t, tok, again, "a re-entry keeps the token")
			require.NoError(t, l.Unlock(bg))
			switch end {
			case 1:
				within(t, 5*time.Second, "the fixed lease's end", l.Done(bg))
				require.ErrorIs(t, l.Unlock(bg), rlock.ErrLeaseExpired)
				require.ErrorIs(t, l.Unlock(bg), rlock.ErrNotHeld) // one more than the ended tenure had
			case 2:
				var freed bool
				if rw {
					freed, err = c2.RWMutex(name).ForceUnlock(bg)
				} else {
					freed, err = c2.Mutex(name).ForceUnlock(bg)
				}
				require.NoError(t, err)
				require.True(t, freed)
				require.ErrorIs(t, l.Unlock(bg), rlock.ErrNotHeld)
			default:
				require.NoError(t, l.Unlock(bg))
			}
		}
	}
}
