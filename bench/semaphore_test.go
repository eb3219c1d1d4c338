package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// semContenders is the number of goroutines that contend for a semaphore's permits.
const semContenders = 16

// contend runs b.N acquire+release cycles spread over semContenders goroutines on clients
// Clients (goroutine g uses Client g%clients), and reports throughput, client-sent scripts
// per cycle, and the spread of acquire waits. cycle does one acquisition and returns the
// release to run after it.
func contend(b *testing.B, srv *redistest.Server, cs []*rlock.Client, cycle func(c *rlock.Client) (release func() error, err error)) {
	b.Helper()
	contest(b, srv, semContenders, func(g int) (func() error, error) { return cycle(cs[g%len(cs)]) }, nil)
}

// BenchmarkSemaphore_Contended is 16 goroutines over 4 Clients each taking one permit of a
// semaphore and giving it back (Acquire(1)+Release(1) is one op), with 1 and 4 permits.
// Every release wakes every parked waiter of every Client (a release may let several in), so
// cmds/op shows the cost of that herd.
func BenchmarkSemaphore_Contended(b *testing.B) {
	for _, permits := range []int{1, 4} {
		b.Run(fmt.Sprintf("permits=%d", permits), func(b *testing.B) {
			srv := redistest.Start(b)
			cs := []*rlock.Client{newClient(b, srv), newClient(b, srv), newClient(b, srv), newClient(b, srv)}
			name := fmt.Sprintf("sem-%d", permits)
			if _, err := cs[0].Semaphore(name).TrySetPermits(bg, permits); err != nil {
				b.Fatal(err)
			}
			contend(b, srv, cs, func(c *rlock.Client) (func() error, error) {
				s := c.Semaphore(name)
				if err := s.Acquire(bg, 1); err != nil {
					return nil, err
				}
				return func() error { return s.Release(bg, 1) }, nil
			})
		})
	}
}

// BenchmarkPermitSemaphore_Contended is BenchmarkSemaphore_Contended for a semaphore of
// expirable permits (lease 10s): a release wakes one parked waiter per Client.
func BenchmarkPermitSemaphore_Contended(b *testing.B) {
	for _, permits := range []int{1, 4} {
		b.Run(fmt.Sprintf("permits=%d", permits), func(b *testing.B) {
			srv := redistest.Start(b)
			cs := []*rlock.Client{newClient(b, srv), newClient(b, srv), newClient(b, srv), newClient(b, srv)}
			name := fmt.Sprintf("psem-%d", permits)
			if _, err := cs[0].PermitSemaphore(name).TrySetPermits(bg, permits); err != nil {
				b.Fatal(err)
			}
			contend(b, srv, cs, func(c *rlock.Client) (func() error, error) {
				p := c.PermitSemaphore(name)
				permit, err := p.Acquire(bg, 10*time.Second)
				if err != nil {
					return nil, err
				}
				return func() error { return p.Release(bg, permit.ID) }, nil
			})
		})
	}
}

// BenchmarkSemaphore_Uncontended is one goroutine's Acquire(1)+Release(1) on a semaphore
// with a free permit: two scripts per op.
func BenchmarkSemaphore_Uncontended(b *testing.B) {
	srv := redistest.Start(b)
	s := newClient(b, srv).Semaphore("sem-free")
	if _, err := s.TrySetPermits(bg, 1); err != nil {
		b.Fatal(err)
	}
	if err := s.Acquire(bg, 1); err != nil { // load the scripts
		b.Fatal(err)
	}
	if err := s.Release(bg, 1); err != nil {
		b.Fatal(err)
	}
	srv.ResetStats(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Acquire(bg, 1); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(bg, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(scripts(b, srv))/float64(b.N), "cmds/op")
}
