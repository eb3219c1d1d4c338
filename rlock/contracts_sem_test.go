package rlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Semaphore: "ErrWrongType when the key holds another kind of value (it is left untouched)",
// for strings that are not a count though Lua's tonumber reads them as a whole number
// ("5.0", "0x10", "1e2", " 3"): AvailablePermits says ErrWrongType for them (strconv), and
// every write must too, writing nothing.
func TestContracts_semaphoreNumericLookingStringIsWrongType(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	for _, val := range []string{"5.0", "0x10", "1e2", " 3"} {
		t.Run(val, func(t *testing.T) {
			s := c.Semaphore(redistest.Name(t))
			_, err := b.do(t, "SET", s.Key(), val)
			require.NoError(t, err)
			dump := func() string { return semDumpKey(t, b, s.Key()) }
			before := dump()
			_, err = s.AvailablePermits(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, "AvailablePermits")
			check := func(op string, err error) {
				t.Helper()
				assert.ErrorIs(t, err, rlock.ErrWrongType, "%s on %q", op, val)
				assert.Equal(t, before, dump(), "%s on %q changed the key", op, val)
			}
			ok, err := s.TryAcquire(bg, 1, 0)
			check("TryAcquire", err)
			assert.False(t, ok)
			check("Release", s.Release(bg, 1))
			_, err = s.ReleaseIfExists(bg, 1)
			check("ReleaseIfExists", err)
			check("AddPermits(-1)", s.AddPermits(bg, -1))
			n, err := s.DrainPermits(bg)
			check("DrainPermits", err)
			assert.Zero(t, n)
			_, err = s.TrySetPermits(bg, 1)
			check("TrySetPermits", err)
			_, err = s.Delete(bg)
			check("Delete", err)
		})
	}
}
