package rlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// locker is what an exclusive primitive offers the shared mutual-exclusion hammer.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// tokener is a locker that hands out fencing tokens; the hammer then checks that no token
// was granted twice.
type tokener interface {
	Token(ctx context.Context) (int64, error)
}

// hammer runs workers goroutines spread over four Clients of b (half of them on the first),
// each with its own locker from newLocker, each taking and releasing it perWorker times
// around a critical section that detects overlaps and lost updates.
func hammer(t *testing.T, b *backend, workers, perWorker int, newLocker func(c *rlock.Client) locker) {
	t.Helper()
	clients := []*rlock.Client{b.client(t), b.client(t), b.client(t), b.client(t)}
	cs := &critical{tokens: map[string][]int64{}}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		c := clients[0]
		if w%2 == 1 {
			c = clients[1+w%3]
		}
		wg.Add(1)
		go func(id string, l locker) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if err := l.Lock(bg); err != nil {
					errs <- err
					return
				}
				var tok int64
				if tl, ok := l.(tokener); ok {
					var err error
					if tok, err = tl.Token(bg); err != nil {
						errs <- err
						return
					}
				} else {
					tok = int64(i) // no tokens: distinct per worker, checked only within it
				}
				start := cs.enter(id, tok)
				cs.leave(start)
				if err := l.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprint(w), newLocker(c))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	if _, ok := newLocker(clients[0]).(tokener); !ok {
		cs.tokens = nil
	}
	cs.check(t, int64(workers*perWorker))
}
