package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// givenOrderLocker hides a Mutex's Key method, so that a MultiLock of such takes its members
// in the given order instead of key order.
type givenOrderLocker struct{ m *rlock.Mutex }

func (g givenOrderLocker) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return g.m.TryLock(ctx, wait, lease)
}
func (g givenOrderLocker) Unlock(ctx context.Context) error { return g.m.Unlock(ctx) }

// BenchmarkMultiLock_Contended is 8 goroutines, each its own owner on one of 4 Clients per
// server, taking a MultiLock of 3 members in turn and giving it back. Members live on one
// server or one on each of 3 servers; every goroutine lists them in the same order, or in
// rotated orders, taken in key order (the default) or in the given order (keyless members:
// rotated orders then clash, and each clash costs a short member wait of 10-20ms and a new
// round). It reports acquisitions per second, scripts per acquisition (all servers, releases
// included; 6 is the floor: 3 acquires and 3 releases) and the spread of waits.
func BenchmarkMultiLock_Contended(b *testing.B) {
	for _, servers := range []int{1, 3} {
		for _, order := range []string{"same", "rotated", "rotated-given"} {
			b.Run(fmt.Sprintf("servers=%d/order=%s", servers, order), func(b *testing.B) {
				srvs := make([]*redistest.Server, servers)
				clients := make([][]*rlock.Client, servers) // clients[s][k]: the k-th Client on server s
				for s := range srvs {
					srvs[s] = redistest.Start(b)
					for k := 0; k < 4; k++ {
						clients[s] = append(clients[s], newClient(b, srvs[s]))
					}
				}
				member := func(g, i int) rlock.Locker {
					m := clients[i%servers][g%4].Mutex(fmt.Sprintf("multi-%d", i))
					if order == "rotated-given" {
						return givenOrderLocker{m}
					}
					return m
				}
				multiContest(b, srvs, 8, func(g int) locker {
					idx := []int{0, 1, 2}
					if order != "same" {
						idx = []int{g % 3, (g + 1) % 3, (g + 2) % 3}
					}
					return rlock.NewMultiLock(member(g, idx[0]), member(g, idx[1]), member(g, idx[2]))
				})
			})
		}
	}
}

// multiContest is hotKeyContest over several servers: the scripts sent to all are counted.
func multiContest(b *testing.B, srvs []*redistest.Server, contenders int, newLocker func(g int) locker) {
	for _, srv := range srvs[1:] {
		srv.ResetStats(b)
	}
	contest(b, srvs[0], contenders, lockers(newLocker, contenders), func() int64 {
		var n int64
		for _, srv := range srvs[1:] {
			n += scripts(b, srv)
		}
		return n
	})
}
