package rlock_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// maxCycleAllocs is what an uncontended Lock+Unlock allocates on the caller's side with a
// cancellable context (BenchmarkMutex_Uncontended reports the same): issue 10 took it from 28
// to 11. rueidis's pools are part of the count; the race detector drops sync.Pool items at
// random, so under -race the bound is a little looser.
const maxCycleAllocs = 11

// TestMutex_uncontendedCycleAllocations keeps the client path's allocations from creeping
// back (a change once added two per cycle by asking errors.As about a nil error).
func TestMutex_uncontendedCycleAllocations(t *testing.T) {
	b := realBackend(t)
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}})
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(t.Name())
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	cycle := func() {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		cycle()
	}
	got := testing.AllocsPerRun(500, cycle)
	limit := float64(maxCycleAllocs)
	if raceEnabled {
		limit += 3 // 13.0 measured: the race detector's sync.Pool drops
	}
	require.LessOrEqual(t, got, limit, "allocations per uncontended cycle")
	t.Logf("%.1f allocations per cycle (limit %.1f)", got, limit)
}
