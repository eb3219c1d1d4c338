package rlock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestRWMutex_unlockWrongTypeWriters: a read-write lock whose writers key holds another type
// (another application's key under the name) refuses every give-back, read or write, with
// an error wrapping ErrWrongType, and writes nothing: the holds stay in Redis as they were.
// (A read hold, and a write hold given back without readers to tell, were given back, the
// writers key left as it was.)
func TestRWMutex_unlockWrongTypeWriters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, rc := b.client(t), b.rueidis(t)
		for _, write := range []bool{false, true} {
			name := redistest.Name(t)
			rw := c.RWMutex(name)
			lock, unlock := rw.RLock, rw.RUnlock
			if write {
				lock, unlock = rw.Lock, rw.Unlock
			}
			require.NoError(t, lock(bg))
			before, err := c.Inspect(bg, name)
			require.NoError(t, err)
			writers := before.Key + ":writers"
			require.NoError(t, rc.Do(bg, rc.B().Set().Key(writers).Value("not a zset").Build()).Error())
			err = unlock(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, "write %v", write)
			after, err := c.Inspect(bg, name)
			require.NoError(t, err)
			require.Equal(t, before.Kind, after.Kind, "write %v", write)
			require.Equal(t, before.Token, after.Token, "write %v", write)
			require.Len(t, after.Holders, 1, "write %v: the refused give-back took the hold", write)
			require.Equal(t, before.Holders[0].Owner, after.Holders[0].Owner)
			require.Equal(t, before.Holders[0].Mode, after.Holders[0].Mode)
			got, err := rc.Do(bg, rc.B().Get().Key(writers).Build()).ToString()
			require.NoError(t, err)
			require.Equal(t, "not a zset", got)
			_, err = rw.ForceUnlock(bg)
			require.NoError(t, err)
			require.NoError(t, rc.Do(bg, rc.B().Del().Key(writers).Build()).Error())
		}
	})
}
