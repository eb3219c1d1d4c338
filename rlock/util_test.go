package rlock_test

import (
	"iter"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func runtimeGoroutines() int { return runtime.NumGoroutine() }

// never fails t if cond holds at any of its checks, every tick for d, made on the test's own
// goroutine. testify's Never runs each check on a goroutine of its own and returns when d
// has passed without waiting for the check in flight: a check that uses t (a command to the
// test's server) could then fail t after the test ended, a panic that ends the whole run
// (TestSemaphore_giveBackAfterDeleteMakesNothing under -race at d864deb: "Fail in goroutine
// after ... has completed", its miniredis closed under the late check).
func never(t *testing.T, cond func() bool, d, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if cond() {
			require.Fail(t, "Condition satisfied", msgAndArgs...)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(tick)
	}
}

// seedOf is the seed of a seeded test: the one env names (to replay a run), else the clock's;
// it logs it with the line that replays the run.
func seedOf(t *testing.T, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(env); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, env)
		seed = s
	}
	t.Logf("seed %d (%s=%d replays this run)", seed, env, seed)
	return seed
}

// budgetOf is an explorer's run time: def, or full under RELOCK_FULL, or the duration that
// env gives (a Go duration such as 20s; a bare number is seconds).
func budgetOf(t *testing.T, env string, def, full time.Duration) time.Duration {
	t.Helper()
	budget := def
	if fullRun() {
		budget = full
	}
	if v := os.Getenv(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			s, ferr := strconv.ParseFloat(v, 64)
			if ferr != nil {
				t.Fatalf("%s=%q: neither a duration nor seconds: %v", env, v, err)
			}
			d = time.Duration(s * float64(time.Second))
		}
		budget = d
	}
	return budget
}

// trialIndices yields the trials an explorer runs: only that one when only >= 0 (trialOf),
// else 0, 1, ... for as long as budget has not passed since begin.
func trialIndices(begin time.Time, only int, budget time.Duration) iter.Seq[int] {
	return func(yield func(int) bool) {
		if only >= 0 {
			yield(only)
			return
		}
		for i := 0; time.Since(begin) <= budget; i++ {
			if !yield(i) {
				return
			}
		}
	}
}

// trialOf is the one trial an explorer runs alone when env names it, else -1 (every trial).
func trialOf(t *testing.T, env string) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: not a trial number", env, v)
	}
	return n
}

// tickStall: a gap between ticks of watchStalls' 5ms ticker longer than this is a stall of
// the process. Lower than the model's stallThreshold: on a machine loaded by other processes
// the calls a test times are delayed by many gaps of 20-50 ms, none of which the model's
// threshold counted (a CI proof at e16af31, run beside benchmarks: TestExplore_WaitBound saw
// returns 101-188 ms after a ctx's deadline with no stall counted; it passes on a quiet one).
const tickStall = 20 * time.Millisecond

// watchStalls measures, until the first call of the function it returns, the stalls of this
// process: a goroutine that a 5ms ticker wakes runs more than tickStall late (a loaded
// machine). onStall (or nil) is told each stall as it is seen. The function returned stops
// the measure (at its first call) and returns how long the process stalled between start
// and end.
func watchStalls(onStall func(gap time.Duration)) func(start, end time.Time) time.Duration {
	return watchStallsOver(tickStall, onStall)
}

// watchStallsOver is watchStalls counting the gaps longer than threshold.
func watchStallsOver(threshold time.Duration, onStall func(gap time.Duration)) func(start, end time.Time) time.Duration {
	var mu sync.Mutex
	var stalls [][2]time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleLate(stop, 5*time.Millisecond, threshold, 0, func(from, to time.Time) {
			if onStall != nil {
				onStall(to.Sub(from))
			}
			mu.Lock()
			stalls = append(stalls, [2]time.Time{from, to})
			mu.Unlock()
		})
	}()
	var once sync.Once
	return func(start, end time.Time) time.Duration {
		once.Do(func() { close(stop); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return overlap(stalls, start, end)
	}
}

// watchSlotStalls measures, as watchStalls does, how long this process stalled, for bounds
// that a stall of either scheduler slot moves (a timer fires from the heap of the slot it
// was set on; a woken goroutine waits in a slot's queue): several samplers (slotSamplers),
// each on a 5ms ticker, started a fraction of a tick apart, and a moment counts as stalled
// when any of them was late then (the union of their lateness), counted from the tick each
// missed (a gap of g counts g-5ms once it is over a millisecond late), not only past
// tickStall. One ticker counting gaps over tickStall missed both: beside a CPU hog, an
// acquire that TestExplore_WaitBound's wait timer sent 34.5 ms after the bound while its
// ticker saw no gap (another sampler of the process saw a 30 ms one then), and many late
// sends after a few gaps of 7-19 ms (helper waitbound29: over 131 sends late by 5 ms or
// more, up to 148 ms, what watchStalls did not count reached 30 ms, 12 ms at the 95th
// percentile; what this one does not, 9.5 ms and 4.8 ms). A bound a library misses by
// itself (a send held back while the process runs on) is still counted whole.
func watchSlotStalls() func(start, end time.Time) time.Duration {
	const tick = 5 * time.Millisecond
	n := max(slotSamplers, 2*runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	var late [][2]time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select { // start a fraction of a tick after the previous sampler
			case <-stop:
				return
			case <-time.After(time.Duration(i) * tick / time.Duration(n)):
			}
			sampleLate(stop, tick, tick+time.Millisecond, tick, func(from, to time.Time) {
				mu.Lock()
				late = append(late, [2]time.Time{from, to})
				mu.Unlock()
			})
		}()
	}
	var once sync.Once
	var union [][2]time.Time
	return func(start, end time.Time) time.Duration {
		once.Do(func() {
			close(stop)
			wg.Wait()
			slices.SortFunc(late, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
			for _, w := range late {
				if k := len(union) - 1; k >= 0 && !w[0].After(union[k][1]) {
					if w[1].After(union[k][1]) {
						union[k][1] = w[1]
					}
					continue
				}
				union = append(union, w)
			}
		})
		return overlap(union, start, end)
	}
}

// slotSamplers is the fewest samplers of watchSlotStalls (2 per scheduler slot if more).
const slotSamplers = 4

// sampleLate wakes every tick until stop closes and calls late(from, to) for every wake that
// came more than over after the one before it: from is that wake plus skip (the part of the
// gap that was no stall: 0, or the tick that was due), to the late wake. The clock is read on
// waking, not the tick's time: a goroutine that a timer wakes late is what delays the calls
// under test (their ctx's timer included).
func sampleLate(stop <-chan struct{}, tick, over, skip time.Duration, late func(from, to time.Time)) {
	tk := time.NewTicker(tick)
	defer tk.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		now := time.Now()
		if now.Sub(last) > over {
			late(last.Add(skip), now)
		}
		last = now
	}
}
