package rlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review21: the sem_* scripts' "strict" check ('^%-?%d+$', 125ae59) says "a count is an
// integer written out plainly, as INCRBY reads it", but INCRBY/DECRBY (Redis string2ll)
// refuse leading zeros, "-0" and values beyond int64, which the pattern accepts: such a
// string is not a count Redis can count with, yet Delete deletes it and reports true, and
// Acquire/Release fail with "value is not an integer" instead of ErrWrongType.
func TestReview21_semaphoreCountRedisRefusesIsWrongType(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	for _, val := range []string{"007", "-0", "9223372036854775808"} {
		t.Run(val, func(t *testing.T) {
			s := c.Semaphore(redistest.Name(t))
			_, err := b.do(t, "SET", s.Key(), val)
			if err != nil {
				t.Fatal(err)
			}
			before := semDumpKey(t, b, s.Key())
			_, err = s.TryAcquire(bg, 1, 0)
			assert.ErrorIs(t, err, rlock.ErrWrongType, "TryAcquire on %q", val)
			assert.ErrorIs(t, s.Release(bg, 1), rlock.ErrWrongType, "Release on %q", val)
			_, err = s.Delete(bg)
			assert.ErrorIs(t, err, rlock.ErrWrongType, "Delete on %q", val)
			assert.Equal(t, before, semDumpKey(t, b, s.Key()), "%q changed", val)
		})
	}
}
