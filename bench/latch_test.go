package bench

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkCountDownLatch_Round is one use of a latch by 4 counters and 4 waiters spread
// over 4 Clients: the latch is set to 4, the waiters Await (parking on pub/sub), the counters
// CountDown concurrently, and the round ends when every waiter has returned. It reports
// client-sent scripts and reads per round, and the time from the last CountDown's return to
// the last waiter's return (the pub/sub wake-up of every waiter), in microseconds and in
// PING round trips.
func BenchmarkCountDownLatch_Round(b *testing.B) {
	const counters, waiters = 4, 4
	srv := redistest.Start(b)
	cs := make([]*rlock.Client, 4)
	for i := range cs {
		cs[i] = newClient(b, srv)
	}
	rtt := pingRTT(b, srv)
	setter := cs[0].CountDownLatch("round")
	waiting := make([]*rlock.CountDownLatch, waiters)
	counting := make([]*rlock.CountDownLatch, counters)
	for i := range waiting {
		waiting[i] = cs[i%len(cs)].CountDownLatch("round")
		counting[i] = cs[(i+1)%len(cs)].CountDownLatch("round")
	}
	// round runs one use of the latch and returns the time from the last CountDown's
	// return to the last waiter's return.
	round := func() time.Duration {
		if ok, err := setter.TrySetCount(bg, counters); err != nil || !ok {
			b.Fatalf("TrySetCount: %v %v", ok, err)
		}
		var wg sync.WaitGroup
		returned := make(chan time.Time, waiters)
		for _, l := range waiting {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := l.Await(bg); err != nil {
					b.Error(err)
				}
				returned <- time.Now()
			}()
		}
		// Let the waiters park, so that the round measures a pub/sub wake-up.
		b.StopTimer()
		redistest.WaitFor(b, 5*time.Second, "the waiters to park", func() bool {
			return latchSubscribers(b, srv, setter) == int64(min(waiters, len(cs)))
		})
		b.StartTimer()
		var last time.Time
		var mu sync.Mutex
		var cw sync.WaitGroup
		for _, l := range counting {
			cw.Add(1)
			go func() {
				defer cw.Done()
				if err := l.CountDown(bg); err != nil {
					b.Error(err)
				}
				mu.Lock()
				if now := time.Now(); now.After(last) {
					last = now
				}
				mu.Unlock()
			}()
		}
		cw.Wait()
		wg.Wait()
		close(returned)
		var end time.Time
		for at := range returned {
			if at.After(end) {
				end = at
			}
		}
		return max(end.Sub(last), 0)
	}
	round() // load the scripts
	srv.ResetStats(b)
	var wakes []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wakes = append(wakes, round())
	}
	b.StopTimer()
	s := srv.CommandStats(b)
	sort.Slice(wakes, func(i, j int) bool { return wakes[i] < wakes[j] })
	b.ReportMetric(float64(s["evalsha"]+s["eval"])/float64(b.N), "scripts/round")
	// Each look at the count by a waiter is a GET and a PTTL; only waiters send PTTL.
	b.ReportMetric(float64(s["pttl"])/float64(b.N), "looks/round")
	b.ReportMetric(float64(wakes[len(wakes)/2].Microseconds()), "p50-wake-us")
	b.ReportMetric(float64(wakes[len(wakes)/2])/float64(rtt), "p50-wake-rtts")
}

// latchSubscribers is the number of connections subscribed to l's channel.
func latchSubscribers(b *testing.B, srv *redistest.Server, l *rlock.CountDownLatch) int64 {
	channel := l.Key() + ":released"
	msg := srv.Do(b, "PUBSUB", "NUMSUB", channel)
	arr, err := msg.ToArray()
	if err != nil || len(arr) != 2 {
		b.Fatalf("PUBSUB NUMSUB %s: %v", channel, fmt.Sprint(arr, err))
	}
	n, _ := arr[1].AsInt64()
	return n
}
