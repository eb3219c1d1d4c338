package rlock_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestFastForm_userStringLikeIt: a user's string at a lock's key that starts with the fast
// form's mark '~' but is not a fast grant's ('~h:<client id>:<n> <client id>.<n>') is a
// user's value like any other: every call on it fails with ErrWrongType and leaves it as it
// was, a string with its value and its expiry (before, the scripts made any '~' string a hash
// {token: value} before reading it: the user's value changed type, and a lock call then waited
// for a holder that does not exist).
func TestFastForm_userStringLikeIt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		for _, v := range []string{"~hello world", "~hello", "~u:ctx 1.1", "~h:abc 7.3 x", "~h:owner not-a-number"} {
			name := redistest.Name(t)
			m, f, rw := c.Mutex(name), c.FairMutex(name), c.RWMutex(name)
			key := m.Key()
			_, err := b.do(t, "SET", key, v, "PX", "60000")
			require.NoError(t, err)
			calls := []struct {
				what string
				f    func() error
			}{
				{"Mutex.TryLock", func() error { _, err := m.TryLock(bg, 0, 0); return err }},
				{"FairMutex.TryLock", func() error { _, err := f.TryLock(bg, 0, 0); return err }},
				{"RWMutex.TryLock", func() error { _, err := rw.TryLock(bg, 0, 0); return err }},
				{"Mutex.ForceUnlock", func() error { _, err := m.ForceUnlock(bg); return err }},
				{"FairMutex.ForceUnlock", func() error { _, err := f.ForceUnlock(bg); return err }},
				{"RWMutex.ForceUnlock", func() error { _, err := rw.ForceUnlock(bg); return err }},
				{"RWMutex.IsLocked", func() error { _, err := rw.IsLocked(bg); return err }},
				{"Mutex.IsLocked", func() error { _, err := m.IsLocked(bg); return err }},
				{"Mutex.HoldCount", func() error { _, err := m.HoldCount(bg); return err }},
			}
			for _, call := range calls {
				err := call.f()
				require.ErrorIs(t, err, rlock.ErrWrongType, "%s on the user's string %q", call.what, v)
				typ, err := b.do(t, "TYPE", key)
				require.NoError(t, err)
				require.Equal(t, "string", str(t, typ), "%s on the user's string %q changed its type", call.what, v)
				got, err := b.do(t, "GET", key)
				require.NoError(t, err)
				require.Equal(t, v, str(t, got), "%s on the user's string %q changed it", call.what, v)
			}
		}
	})
}

// str is m's string value.
func str(t *testing.T, m rueidis.RedisMessage) string {
	t.Helper()
	v, err := m.ToString()
	require.NoError(t, err)
	return v
}
