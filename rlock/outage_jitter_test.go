package rlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// Waiters that meet an outage together ride it out with backoff (waitLoop: 10 ms doubling to
// 1 s) whose pauses are jittered, so that they do not come back together, in lockstep, at
// each step (note26: 500 waiters of one lock on an overloaded server retried together).
// Without jitter, every pause of a waiter is its step, 10 ms times a power of two, plus the
// timer's lateness; with it, a pause is drawn from the upper half of its step, and few land
// just above a power of two. Eight waiters (their own locks and owners) meet refused sends
// for 900 ms; of their pauses of 35 ms or more (about 32), those within 8 ms above 40, 80,
// 160 or 320 ms must be under half (with jitter about a tenth are, by chance: under half
// fails about once in 10^5 runs; without it, all but the late ones).
func TestWait_outageBackoffIsJittered(t *testing.T) {
	t.Parallel() // its own server, Client and names; its statistic reads gaps of 35 ms and more
	b := realBackend(t)
	hc, c := hardSetup(t, b)
	const waiters = 8
	name := redistest.Name(t)
	var (
		mu       sync.Mutex
		refusing = true
		sends    = make([][]time.Time, waiters) // each waiter's refused acquires
	)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" {
			return call()
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if !refusing {
			return call()
		}
		words := strings.Join(cmd.args, " ")
		for i := range waiters {
			if strings.Contains(words, fmt.Sprintf("%s-w%d", name, i)) {
				sends[i] = append(sends[i], now)
			}
		}
		return refusedResult()
	})
	var wg sync.WaitGroup
	errs := make([]error, waiters)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(fmt.Sprintf("%s-w%d", name, i))
			if errs[i] = m.Lock(bg); errs[i] == nil {
				errs[i] = m.Unlock(bg)
			}
		}()
	}
	time.Sleep(900 * time.Millisecond) // the outage: its length only sets how many pauses are seen
	mu.Lock()
	refusing = false
	mu.Unlock()
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "waiter %d rides the outage out, then locks and unlocks", i)
	}
	mu.Lock()
	defer mu.Unlock()
	var pauses, onGrid int
	var all []string
	for i, ts := range sends {
		for k := 1; k < len(ts); k++ {
			p := ts[k].Sub(ts[k-1])
			if p < 35*time.Millisecond {
				continue
			}
			pauses++
			all = append(all, fmt.Sprintf("w%d:%v", i, p.Round(time.Millisecond)))
			for step := 40 * time.Millisecond; step <= 320*time.Millisecond; step *= 2 {
				if p >= step && p < step+8*time.Millisecond {
					onGrid++
				}
			}
		}
	}
	require.GreaterOrEqual(t, pauses, 16, "the waiters' pauses of 35 ms or more: %v", all)
	require.Less(t, 2*onGrid, pauses, "%d of %d pauses lie just above a step of the unjittered backoff: the waiters retry in lockstep: %v", onGrid, pauses, all)
}
