package rlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// rwScripts is a monotonic count of the requests the backend served: the scripts run, on a
// real server; every command, on miniredis. Tests use it to learn that waiters have made
// their attempts.
func rwScripts(t *testing.T, b *backend) int64 {
	t.Helper()
	if b.srv != nil {
		s := b.srv.CommandStats(t)
		return s["evalsha"] + s["eval"]
	}
	return int64(b.mr.CommandCount())
}

// rwTry asserts the outcome of a single attempt.
func rwTry(t *testing.T, want bool, ok bool, err error, what string) {
	t.Helper()
	require.NoError(t, err, what)
	require.Equal(t, want, ok, what)
}

// rwState asserts what IsWriteLocked and IsReadLocked report.
func rwState(t *testing.T, rw *rlock.RWMutex, write, read bool) {
	t.Helper()
	w, err := rw.IsWriteLocked(bg)
	require.NoError(t, err)
	require.Equal(t, write, w, "IsWriteLocked")
	r, err := rw.IsReadLocked(bg)
	require.NoError(t, err)
	require.Equal(t, read, r, "IsReadLocked")
	l, err := rw.IsLocked(bg)
	require.NoError(t, err)
	require.Equal(t, write || read, l, "IsLocked")
}

// Many readers hold at once; a writer waits until the last one has gone, and is woken by
// that release (well before its claim's refresh would wake it).
func TestRWMutex_manyReadersThenWriter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c1, c2 := b.client(t), b.client(t)
		var readers []*rlock.RWMutex
		for i := 0; i < 6; i++ {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			rw := c.RWMutex(name)
			ok, err := rw.TryRLock(bg, 0, 0)
			rwTry(t, true, ok, err, "reader "+fmt.Sprint(i))
			readers = append(readers, rw)
		}
		rwState(t, readers[0], false, true)

		w := b.client(t).RWMutex(name)
		ok, err := w.TryLock(bg, 0, 0)
		rwTry(t, false, ok, err, "a writer while readers hold")
		got := make(chan error, 1)
		go func() { got <- w.Lock(bg) }()
		for _, r := range readers[:5] {
			require.NoError(t, r.RUnlock(bg))
		}
		select {
		case err := <-got:
			t.Fatalf("the writer got in while a reader holds: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		start := time.Now()
		require.NoError(t, readers[5].RUnlock(bg))
		require.NoError(t, await(t, got, 10*time.Second, "the writer after the last reader"))
		require.Less(t, time.Since(start), 2*time.Second, "the last reader's release wakes the writer")
		rwState(t, w, true, false)
		require.NoError(t, w.Unlock(bg))
		rwState(t, w, false, false)
	})
}

// A writer blocks other owners' readers; it may itself take read holds, and the read side
// reads as locked only once it does.
func TestRWMutex_writerBlocksReaders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c := b.client(t)
		w, r := c.RWMutex(name), b.client(t).RWMutex(name)
		require.NoError(t, w.Lock(bg))
		rwState(t, w, true, false)
		ok, err := r.TryRLock(bg, 0, 0)
		rwTry(t, false, ok, err, "a reader while written")
		start := time.Now()
		ok, err = c.RWMutex(name).TryRLock(bg, 150*time.Millisecond, 0)
		rwTry(t, false, ok, err, "a reader of the same Client, with a wait")
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
		ok, err = c.RWMutex(name).TryLock(bg, 0, 0)
		rwTry(t, false, ok, err, "another writer")

		require.NoError(t, w.RLock(bg), "the writer takes a read hold")
		rwState(t, w, true, true)
		ok, err = r.TryRLock(bg, 0, 0)
		rwTry(t, false, ok, err, "still no reader of another owner")
		require.NoError(t, w.RUnlock(bg))
		require.NoError(t, w.Unlock(bg))
		ok, err = r.TryRLock(bg, 0, 0)
		rwTry(t, true, ok, err, "a reader once the writer has gone")
		require.NoError(t, r.RUnlock(bg))
	})
}

// Write then read, then releasing the write hold, leaves the lock read-held by the owner
// (downgrade); the opposite (upgrade) fails at once with ErrUpgrade.
func TestRWMutex_downgradeNoUpgrade(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c := b.client(t)
		rw, other := c.RWMutex(name), b.client(t).RWMutex(name)
		require.NoError(t, rw.Lock(bg))
		require.NoError(t, rw.RLock(bg))
		require.NoError(t, rw.Unlock(bg))
		rwState(t, rw, false, true)
		ok, err := other.TryRLock(bg, 0, 0)
		rwTry(t, true, ok, err, "another reader after the downgrade")
		_, err = other.TryLock(bg, 0, 0)
		require.ErrorIs(t, err, rlock.ErrUpgrade, "the other owner holds a read hold too")
		require.NoError(t, other.RUnlock(bg))
		ok, err = other.TryLock(bg, 0, 0)
		rwTry(t, false, ok, err, "a writer while the downgraded owner reads")

		// Upgrade: refused at once, by Lock and by a waiting TryLock; nothing changes.
		start := time.Now()
		err = rw.Lock(bg)
		require.ErrorIs(t, err, rlock.ErrUpgrade)
		require.Contains(t, err.Error(), name)
		ok, err = rw.TryLock(bg, 5*time.Second, 0)
		require.ErrorIs(t, err, rlock.ErrUpgrade)
		require.False(t, ok)
		require.Less(t, time.Since(start), 2*time.Second, "an upgrade fails at once")
		n, err := rw.ReadHoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rwState(t, rw, false, true)

		// After giving back the read hold the owner takes the write hold.
		require.NoError(t, rw.RUnlock(bg))
		ok, err = rw.TryLock(bg, 0, 0)
		rwTry(t, true, ok, err, "the write hold once the read holds are gone")
		require.NoError(t, rw.Unlock(bg))
	})
}

// Releasing the write hold wakes every waiting reader at once.
func TestRWMutex_writeReleaseWakesAllReaders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		w := b.client(t).RWMutex(name)
		require.NoError(t, w.Lock(bg)) // watchdog mode: its lease (30s) would keep readers out
		clients := []*rlock.Client{b.client(t), b.client(t)}
		const readers = 20
		rws := make([]*rlock.RWMutex, readers)
		for i := range rws {
			rws[i] = clients[i%2].RWMutex(name)
			ok, err := rws[i].TryRLock(bg, 0, 0)
			rwTry(t, false, ok, err, "a reader while written")
		}
		base := rwScripts(t, b)
		got := make(chan error, readers)
		for _, rw := range rws {
			go func() { got <- rw.RLock(bg) }()
		}
		redistest.WaitFor(t, 10*time.Second, "the readers' attempts", func() bool {
			return rwScripts(t, b)-base >= readers
		})
		subscribed(t, b, w.Key()+":released:read", 2) // both Clients listen for readers
		start := time.Now()
		require.NoError(t, w.Unlock(bg))
		for i := 0; i < readers; i++ {
			require.NoError(t, await(t, got, 10*time.Second, "every reader"))
		}
		require.Less(t, time.Since(start), 2*time.Second, "one release wakes every reader")
		rwState(t, w, false, true)
		for _, rw := range rws {
			require.NoError(t, rw.RUnlock(bg))
		}
		rwState(t, w, false, false)
	})
}

// When the write hold ends while another writer waits, that writer goes before the waiting
// readers, and its own release then wakes them.
func TestRWMutex_writersBeforeWaitingReaders(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		w1 := b.client(t).RWMutex(name)
		require.NoError(t, w1.Lock(bg)) // watchdog mode: 30s
		r := b.client(t).RWMutex(name)
		rgot := make(chan error, 1)
		go func() { rgot <- r.RLock(bg) }()
		subscribed(t, b, w1.Key()+":released:read", 1)
		w2 := b.client(t).RWMutex(name)
		wgot := make(chan error, 1)
		go func() { wgot <- w2.Lock(bg) }()
		redistest.WaitFor(t, 10*time.Second, "the second writer's claim", func() bool {
			msg, err := b.do(t, "ZCARD", w1.Key()+":writers")
			require.NoError(t, err)
			n, _ := msg.AsInt64()
			return n == 1
		})
		require.NoError(t, w1.Unlock(bg))
		require.NoError(t, await(t, wgot, 10*time.Second, "the waiting writer"))
		select {
		case err := <-rgot:
			t.Fatalf("a reader got in before the waiting writer was served: %v", err)
		default:
		}
		start := time.Now()
		require.NoError(t, w2.Unlock(bg))
		require.NoError(t, await(t, rgot, 10*time.Second, "the reader after the last writer"))
		require.Less(t, time.Since(start), 2*time.Second, "the last writer's release wakes the reader")
		require.NoError(t, r.RUnlock(bg))
	})
}

// A crashed reader's hold stops blocking writers when its own lease ends, while a live
// reader's goes on blocking them; giving back a hold shrinks the key's expiry to the
// longest lease left.
func TestRWMutex_crashedReader(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out crashed readers' leases, ~1 s (run without -short)")
	}
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		t.Run("fixed lease", func(t *testing.T) {
			name := redistest.Name(t)
			dead := b.client(t)
			ok, err := dead.RWMutex(name).TryRLock(bg, 0, 400*time.Millisecond)
			rwTry(t, true, ok, err, "the doomed reader")
			live := b.client(t).RWMutex(name)
			require.NoError(t, live.RLock(bg)) // watchdog mode: 30s
			require.NoError(t, dead.Close())
			require.NoError(t, live.RUnlock(bg))
			ttl, err := b.do(t, "PTTL", live.Key())
			require.NoError(t, err)
			ms, _ := ttl.AsInt64()
			require.LessOrEqual(t, ms, int64(400), "the expiry shrinks back to the dead reader's lease")
			w := b.client(t).RWMutex(name)
			start := time.Now()
			ok, err = w.TryLock(bg, 10*time.Second, 0)
			rwTry(t, true, ok, err, "the writer after the dead reader's lease")
			require.Less(t, time.Since(start), 3*time.Second)
			require.NoError(t, w.Unlock(bg))
		})
		t.Run("watchdog", func(t *testing.T) {
			name := redistest.Name(t)
			dead := b.client(t, rlock.WithWatchdogTimeout(300*time.Millisecond))
			require.NoError(t, dead.RWMutex(name).RLock(bg))
			live := b.client(t).RWMutex(name)
			ok, err := live.TryRLock(bg, 0, 0)
			rwTry(t, true, ok, err, "a second reader")
			require.NoError(t, dead.Close()) // its watchdog stops: its lease runs out
			w := b.client(t).RWMutex(name)
			ok, err = w.TryLock(bg, 700*time.Millisecond, 0)
			rwTry(t, false, ok, err, "the live reader still blocks the writer")
			got := make(chan error, 1)
			go func() { got <- w.Lock(bg) }()
			require.NoError(t, live.RUnlock(bg))
			require.NoError(t, await(t, got, 5*time.Second, "the writer once the live reader left"))
			require.NoError(t, w.Unlock(bg))
		})
	})
}

// A writer that waits holds new readers back (writers first), so a stream of overlapping
// readers cannot starve it; once it gives up, readers come in at once.
func TestRWMutex_writerNotStarved(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		clients := []*rlock.Client{b.client(t), b.client(t)}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads atomic.Int64
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(rw *rlock.RWMutex, i int) {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 4 * time.Millisecond) // stagger: the lock is never free
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := rw.RLock(bg); err != nil {
						errs <- err
						return
					}
					reads.Add(1)
					time.Sleep(30 * time.Millisecond)
					if err := rw.RUnlock(bg); err != nil {
						errs <- err
						return
					}
				}
			}(clients[i%2].RWMutex(name), i)
		}
		redistest.WaitFor(t, 10*time.Second, "the stream of readers", func() bool { return reads.Load() >= 12 })
		w := b.client(t).RWMutex(name)
		got := make(chan error, 1)
		go func() { got <- w.Lock(bg) }()
		err := await(t, got, 10*time.Second, "the writer through a stream of readers")
		require.NoError(t, err)
		rwState(t, w, true, false)
		require.NoError(t, w.Unlock(bg))
		n := reads.Load()
		redistest.WaitFor(t, 10*time.Second, "the readers to go on", func() bool { return reads.Load() > n })
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})
}

// A waiting writer's claim refuses new readers; a writer that gives up withdraws it, and a
// writer that dies while waiting loses it after the waiter timeout.
func TestRWMutex_writerClaim(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).RWMutex(name)
		require.NoError(t, holder.RLock(bg))
		w := b.client(t).RWMutex(name)
		ok, err := w.TryLock(bg, 0, 0)
		rwTry(t, false, ok, err, "a single attempt")
		r := b.client(t).RWMutex(name)
		ok, err = r.TryRLock(bg, 0, 0)
		rwTry(t, true, ok, err, "a single write attempt claims nothing")
		require.NoError(t, r.RUnlock(bg))

		ctx, cancel := context.WithCancel(bg)
		got := make(chan error, 1)
		go func() { got <- w.Lock(ctx) }()
		redistest.WaitFor(t, 10*time.Second, "the writer's claim", func() bool {
			ok, err := r.TryRLock(bg, 0, 0)
			require.NoError(t, err)
			if ok {
				require.NoError(t, r.RUnlock(bg))
			}
			return !ok
		})
		ok, err = holder.TryRLock(bg, 0, 0)
		rwTry(t, true, ok, err, "a reader inside re-enters while a writer waits")
		cancel()
		require.ErrorIs(t, await(t, got, 10*time.Second, "the writer to give up"), context.Canceled)
		// Withdrawn before the return, or, when Redis took more than the 100 ms grace to
		// answer (a loaded machine: 3 of 21 runs), in the background right after (the
		// godoc's words); well before the claim could run out (the waiter timeout, 10 s).
		redistest.WaitFor(t, 2*time.Second, "the claim withdrawn when the writer gave up", func() bool {
			ok, err := r.TryRLock(bg, 0, 0)
			require.NoError(t, err)
			if ok {
				require.NoError(t, r.RUnlock(bg))
			}
			return ok
		})

		// A writer whose Client dies while it waits keeps readers back only until its
		// claim runs out. (Close alone would withdraw the claim: its Redis refuses every
		// script first, as a dead or cut-off process's would.)
		drc := refuseSends(b.rueidis(t))
		doomed, err := rlock.New(drc, rlock.WithWaiterTimeout(300*time.Millisecond))
		require.NoError(t, err)
		defer doomed.Close()
		dw := doomed.RWMutex(name)
		got = make(chan error, 1)
		go func() { got <- dw.Lock(bg) }()
		redistest.WaitFor(t, 10*time.Second, "the doomed writer's claim", func() bool {
			ok, err := r.TryRLock(bg, 0, 0)
			require.NoError(t, err)
			if ok {
				require.NoError(t, r.RUnlock(bg))
			}
			return !ok
		})
		drc.refuseAll(t)
		require.NoError(t, doomed.Close())
		require.ErrorIs(t, await(t, got, 10*time.Second, "the doomed writer"), rlock.ErrClosed)
		start := time.Now()
		ok, err = r.TryRLock(bg, 5*time.Second, 0)
		rwTry(t, true, ok, err, "a reader once the dead writer's claim ran out")
		require.Less(t, time.Since(start), 3*time.Second)
		require.NoError(t, r.RUnlock(bg))
		require.NoError(t, holder.RUnlock(bg))
		require.NoError(t, holder.RUnlock(bg))
	})
}

// A write hold with a fixed lease ends by itself: the waiting readers come in, and the late
// Unlock reports ErrNotHeld.
func TestRWMutex_writeLeaseExpires(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		w := b.client(t).RWMutex(name)
		ok, err := w.TryLock(bg, 0, 300*time.Millisecond)
		rwTry(t, true, ok, err, "the writer")
		r := b.client(t).RWMutex(name)
		start := time.Now()
		ok, err = r.TryRLock(bg, 5*time.Second, 0)
		rwTry(t, true, ok, err, "a reader once the write lease ended")
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		within(t, 5*time.Second, "the writer's Done", w.Done(bg))
		require.ErrorIs(t, w.Unlock(bg), rlock.ErrNotHeld)
		require.NoError(t, r.RUnlock(bg))

		// The write hold's lease ends while its owner's read holds live on: the lock is
		// then only read, and other readers come in.
		ok, err = w.TryLock(bg, 0, 300*time.Millisecond)
		rwTry(t, true, ok, err, "the writer again")
		require.NoError(t, w.RLock(bg))
		start = time.Now()
		ok, err = r.TryRLock(bg, 5*time.Second, 0)
		rwTry(t, true, ok, err, "a reader once the write lease ended, the writer still reading")
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
		rwState(t, w, false, true)
		require.NoError(t, w.RLocker().Err(bg), "the read holds live on")
		require.ErrorIs(t, w.Unlock(bg), rlock.ErrNotHeld)
		require.NoError(t, w.RUnlock(bg))
		require.NoError(t, r.RUnlock(bg))
		rwState(t, w, false, false)
	})
}

// Both kinds are reentrant per owner and counted apart; a context owner makes two handles
// one owner.
func TestRWMutex_reentrancyAndHoldCounts(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c := b.client(t)
		rw := c.RWMutex(name)
		counts := func(wantW, wantR int) {
			t.Helper()
			n, err := rw.WriteHoldCount(bg)
			require.NoError(t, err)
			require.Equal(t, wantW, n, "write holds")
			n, err = rw.ReadHoldCount(bg)
			require.NoError(t, err)
			require.Equal(t, wantR, n, "read holds")
			n, err = rw.RLocker().HoldCount(bg)
			require.NoError(t, err)
			require.Equal(t, wantR, n, "read holds via RLocker")
		}
		counts(0, 0)
		require.NoError(t, rw.Lock(bg))
		tok, err := rw.Token(bg)
		require.NoError(t, err)
		ok, err := rw.TryLock(bg, 0, 0)
		rwTry(t, true, ok, err, "write re-entry")
		tok2, err := rw.Token(bg)
		require.NoError(t, err)
		require.Equal(t, tok, tok2, "re-entry keeps the token")
		require.NoError(t, rw.RLock(bg))
		require.NoError(t, rw.RLocker().Lock(bg))
		ok, err = rw.RLocker().TryLock(bg, 0, 0)
		rwTry(t, true, ok, err, "read re-entry")
		counts(2, 3)
		require.NoError(t, rw.Err(bg))
		require.NoError(t, rw.RLocker().Err(bg))

		other := c.RWMutex(name)
		require.ErrorIs(t, other.Unlock(bg), rlock.ErrNotHeld)
		require.ErrorIs(t, other.RUnlock(bg), rlock.ErrNotHeld)

		require.NoError(t, rw.Unlock(bg))
		counts(1, 3)
		ok, err = other.TryRLock(bg, 0, 0)
		rwTry(t, false, ok, err, "still written")
		require.NoError(t, rw.Unlock(bg))
		counts(0, 3)
		within(t, time.Second, "the write hold's Done", rw.Done(bg))
		require.ErrorIs(t, rw.Err(bg), rlock.ErrNotHeld)
		_, err = rw.Token(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.ErrorIs(t, rw.Unlock(bg), rlock.ErrNotHeld)
		select {
		case <-rw.RLocker().Done(bg):
			t.Fatal("the read holds ended with the write hold")
		default:
		}
		for i := 0; i < 3; i++ {
			require.NoError(t, rw.RLocker().Unlock(bg))
		}
		counts(0, 0)
		require.ErrorIs(t, rw.RUnlock(bg), rlock.ErrNotHeld)
		rwState(t, rw, false, false)

		// A context owner: two handles of one name are one owner.
		ctx := c.WithNewOwner(bg)
		a, b2 := c.RWMutex(name), b.client(t).RWMutex(name)
		require.NoError(t, a.RLock(ctx))
		ok, err = b2.TryRLock(ctx, 0, 0)
		rwTry(t, true, ok, err, "the same context owner re-enters")
		n, err := b2.ReadHoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.NoError(t, a.RUnlock(ctx))
		require.NoError(t, b2.RUnlock(ctx))
		rwState(t, a, false, false)
	})
}

// The watchdog renews both kinds well past the watchdog timeout. A 1 s lease (a third of it,
// 333 ms, for each renewal to land) lets it run beside the parallel tests.
func TestRWMutex_watchdogRenewsBothKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("long: holds both kinds across several watchdog leases (run without -short)")
	}
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		name, name2 := redistest.Name(t), redistest.Name(t)
		const lease = time.Second
		c := b.client(t, rlock.WithWatchdogTimeout(lease))
		w := c.RWMutex(name)
		require.NoError(t, w.Lock(bg))
		require.NoError(t, w.RLock(bg))
		r1, r2 := c.RWMutex(name2), c.RWMutex(name2)
		require.NoError(t, r1.RLock(bg))
		require.NoError(t, r2.RLock(bg))
		time.Sleep(4 * lease) // four watchdog timeouts
		for _, rw := range []*rlock.RWMutex{w, r1, r2} {
			require.NoError(t, rw.RLocker().Err(bg))
		}
		require.NoError(t, w.Err(bg))
		other := b.client(t)
		ok, err := other.RWMutex(name).TryRLock(bg, 0, 0)
		rwTry(t, false, ok, err, "still written")
		ok, err = other.RWMutex(name2).TryLock(bg, 0, 0)
		rwTry(t, false, ok, err, "still read")
		rwState(t, w, true, true)
		require.NoError(t, w.Unlock(bg))
		require.NoError(t, w.RUnlock(bg))
		require.NoError(t, r1.RUnlock(bg))
		require.NoError(t, r2.RUnlock(bg))
		rwState(t, r1, false, false)
	})
}

// ForceUnlock frees the lock in either mode; the former holders' Unlock reports ErrNotHeld
// and their watchdog tells them of the loss.
func TestRWMutex_forceUnlock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		// A 1-s lease renewed every quarter: the loss is seen within 250ms, and a stall of the
		// loaded process does not let the write hold run out before the force (300ms at two
		// thirds: the force found nothing under a SIGSTOP pattern of 250ms every 500ms,
		// helper flaky23).
		c := b.client(t, rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
		rw := c.RWMutex(name)
		admin := b.client(t).RWMutex(name)
		ok, err := admin.ForceUnlock(bg)
		rwTry(t, false, ok, err, "nothing to free")

		require.NoError(t, rw.Lock(bg))
		got := make(chan error, 1)
		r := b.client(t).RWMutex(name)
		go func() { got <- r.RLock(bg) }()
		ok, err = admin.ForceUnlock(bg)
		rwTry(t, true, ok, err, "the write hold")
		require.NoError(t, await(t, got, 5*time.Second, "the waiting reader, woken"))
		within(t, 5*time.Second, "the former writer's loss", rw.Done(bg))
		require.ErrorIs(t, rw.Err(bg), rlock.ErrLockLost)
		require.ErrorIs(t, rw.Unlock(bg), rlock.ErrNotHeld)

		ok, err = admin.ForceUnlock(bg)
		rwTry(t, true, ok, err, "the read holds")
		rwState(t, admin, false, false)
		require.ErrorIs(t, r.RUnlock(bg), rlock.ErrNotHeld)
	})
}

// The shared mutual-exclusion hammer, on the write side.
func TestRWMutex_mutualExclusion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		hammer(t, b, 12, 15, func(c *rlock.Client) locker { return c.RWMutex(name) })
	})
}

// Readers and writers over several Clients: no reader is inside while a writer is, no two
// writers are inside together, and readers do share the lock.
func TestRWMutex_readersAndWriters(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		clients := []*rlock.Client{b.client(t), b.client(t), b.client(t)}
		var readers, writers, maxReaders, bad atomic.Int32
		var maxWait atomic.Int64
		waited := func(start time.Time) {
			d := int64(time.Since(start))
			for m := maxWait.Load(); d > m && !maxWait.CompareAndSwap(m, d); m = maxWait.Load() {
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := 0; g < 9; g++ {
			wg.Add(1)
			go func(g int, rw *rlock.RWMutex) {
				defer wg.Done()
				for i := 0; i < 16; i++ {
					start := time.Now()
					if (g+i)%4 == 0 {
						if err := rw.Lock(bg); err != nil {
							errs <- err
							return
						}
						waited(start)
						if writers.Add(1) != 1 || readers.Load() != 0 {
							bad.Add(1)
						}
						time.Sleep(time.Millisecond)
						writers.Add(-1)
						if err := rw.Unlock(bg); err != nil {
							errs <- err
							return
						}
						continue
					}
					if err := rw.RLock(bg); err != nil {
						errs <- err
						return
					}
					waited(start)
					n := readers.Add(1)
					if writers.Load() != 0 {
						bad.Add(1)
					}
					for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					readers.Add(-1)
					if err := rw.RUnlock(bg); err != nil {
						errs <- err
						return
					}
				}
			}(g, clients[g%3].RWMutex(name))
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Zero(t, bad.Load(), "a reader and a writer, or two writers, were inside together")
		require.Greater(t, maxReaders.Load(), int32(1), "readers never shared the lock")
		t.Logf("longest wait %v, most readers inside at once %d", time.Duration(maxWait.Load()), maxReaders.Load())
	})
}

func TestRWMutex_badInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		empty := c.RWMutex("")
		require.ErrorIs(t, empty.Lock(bg), rlock.ErrInvalid)
		require.ErrorIs(t, empty.RLock(bg), rlock.ErrInvalid)
		require.ErrorIs(t, empty.RLocker().Lock(bg), rlock.ErrInvalid)
		require.ErrorIs(t, empty.Unlock(bg), rlock.ErrInvalid)
		require.ErrorIs(t, empty.RUnlock(bg), rlock.ErrInvalid)
		_, err := empty.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = empty.ForceUnlock(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = empty.ReadHoldCount(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)

		rw := c.RWMutex(redistest.Name(t))
		_, err = rw.TryLock(bg, -time.Second, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = rw.TryRLock(bg, -time.Second, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = rw.TryLock(bg, 0, time.Microsecond)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = rw.TryRLock(bg, 0, time.Microsecond)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.ErrorIs(t, rw.RLock(rlock.WithOwner(bg, "")), rlock.ErrInvalid)
		_, err = rw.WriteHoldCount(rlock.WithOwner(bg, ""))
		require.ErrorIs(t, err, rlock.ErrInvalid)
		rwState(t, rw, false, false)

		// After Close.
		closed := b.client(t)
		crw := closed.RWMutex(redistest.Name(t))
		require.NoError(t, closed.Close())
		require.ErrorIs(t, crw.Lock(bg), rlock.ErrClosed)
		require.ErrorIs(t, crw.RLock(bg), rlock.ErrClosed)
		_, err = crw.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrClosed)
	})
}

// A key of another type, or another kind of lock, at the name: ErrWrongType, untouched.
func TestRWMutex_wrongType(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		rw := c.RWMutex(redistest.Name(t))
		_, err := b.do(t, "SET", rw.Key(), "not a lock")
		require.NoError(t, err)
		require.ErrorIs(t, rw.Lock(bg), rlock.ErrWrongType)
		require.ErrorIs(t, rw.RLock(bg), rlock.ErrWrongType)
		_, err = rw.TryLock(bg, 100*time.Millisecond, 0)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.ErrorIs(t, rw.Unlock(bg), rlock.ErrWrongType)
		require.ErrorIs(t, rw.RUnlock(bg), rlock.ErrWrongType)
		_, err = rw.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = rw.ForceUnlock(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		v, err := b.do(t, "GET", rw.Key())
		require.NoError(t, err)
		s, _ := v.ToString()
		require.Equal(t, "not a lock", s)

		// A plain Mutex of the same name.
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		rw = c.RWMutex(name)
		require.ErrorIs(t, rw.Lock(bg), rlock.ErrWrongType)
		require.ErrorIs(t, rw.RLock(bg), rlock.ErrWrongType)
		_, err = rw.ForceUnlock(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the plain lock is untouched")
		require.NoError(t, m.Unlock(bg))
	})
}

// On Cluster: every script's keys share a slot, and the watchdog renews both kinds, grouped
// by kind and slot.
func TestRWMutex_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("long: Redis Cluster topology (run without -short)")
	}
	b, rc := clusterBackend(t)
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(600*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	names := []string{"}x", "{user}:cart", "plain"}
	for i := 0; i < 20; i++ {
		names = append(names, fmt.Sprintf("%s-%d", redistest.Name(t), i))
	}
	var rws []*rlock.RWMutex
	for i, name := range names {
		rw := c.RWMutex(name)
		if i%2 == 0 {
			require.NoError(t, rw.Lock(bg), name)
		}
		require.NoError(t, rw.RLock(bg), name)
		rws = append(rws, rw)
	}
	time.Sleep(1500 * time.Millisecond) // more than two renewal periods
	for i, rw := range rws {
		require.NoError(t, rw.RLocker().Err(bg), names[i])
		if i%2 == 0 {
			require.NoError(t, rw.Err(bg), names[i])
		}
	}

	// A reader of another Client, woken by the write release.
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	r := c2.RWMutex(names[0])
	got := make(chan error, 1)
	go func() { got <- r.RLock(bg) }()
	subscribed(t, b, rws[0].Key()+":released:read", 1)
	require.NoError(t, rws[0].Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the reader on Cluster"))
	require.NoError(t, r.RUnlock(bg))
	for i, rw := range rws {
		if i%2 == 0 && i > 0 {
			require.NoError(t, rw.Unlock(bg))
		}
		require.NoError(t, rw.RUnlock(bg))
	}
}

// TestRWMutex_ownerIDsNeverNameAnotherField: as TestMutex_ownerIDsNeverNameAnotherField, for
// both sides of a read-write lock, whose hash also holds the read counts and their records.
func TestRWMutex_ownerIDsNeverNameAnotherField(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		rw := c.RWMutex(redistest.Name(t))
		a, ar := rlock.WithOwner(bg, "a"), rlock.WithOwner(bg, "a:r")
		counts := func(ctx context.Context, write, read int) {
			t.Helper()
			n, err := rw.WriteHoldCount(ctx)
			require.NoError(t, err)
			require.Equal(t, write, n, "write holds")
			n, err = rw.ReadHoldCount(ctx)
			require.NoError(t, err)
			require.Equal(t, read, n, "read holds")
		}

		// Two readers, each counted apart.
		require.NoError(t, rw.RLock(a))
		require.NoError(t, rw.RLock(ar))
		require.NoError(t, rw.RLock(a))
		counts(a, 0, 2)
		counts(ar, 0, 1)
		require.NoError(t, rw.RUnlock(a))
		require.NoError(t, rw.RUnlock(a))
		counts(a, 0, 0)
		counts(ar, 0, 1) // a's last release must not take ar's hold with it
		locked, err := rw.IsReadLocked(bg)
		require.NoError(t, err)
		require.True(t, locked)
		require.NoError(t, rw.RUnlock(ar))
		require.ErrorIs(t, rw.RUnlock(ar), rlock.ErrNotHeld)

		// A writer; the other owner is contention on both sides.
		require.NoError(t, rw.Lock(a))
		ok, err := rw.TryLock(ar, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = rw.TryRLock(ar, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, rw.Lock(a))
		counts(a, 2, 0)
		counts(ar, 0, 0)
		require.NoError(t, rw.Unlock(a))
		require.NoError(t, rw.Unlock(a))
		locked, err = rw.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
	})
}

// An owner whose RLock was granted in Redis but left before the reply came (its ctx ended)
// holds no read hold; the grant is given back in the background once the reply comes. A
// write TryLock of that owner meanwhile must not be refused as an upgrade (ErrUpgrade: "the
// owner holds read holds"): it waits for that give-back within its wait, then takes the free
// lock (a single attempt, wait 0, reports the lock not acquired). Found by
// the model test (RWMutex seed 4391733204140988631: a reply delayed 149 ms, the caller gone
// at 130 ms, its next TryLock[w] refused as an upgrade).
func TestRWMutex_writeAfterLeftReadAcquireWaitsForItsGiveBack(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		gc := holdReply(b.rueidis(t))
		c, err := rlock.New(gc)
		require.NoError(t, err)
		defer c.Close()
		rw := c.RWMutex(redistest.Name(t))
		require.NoError(t, rw.RLock(bg)) // the scripts are loaded: the next send runs them
		require.NoError(t, rw.RUnlock(bg))

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		gc.armed.Store(true)
		go func() { <-gc.sent; cancel() }()
		require.ErrorIs(t, rw.RLock(ctx), context.Canceled, "granted in Redis, the caller gone before the reply")

		// A single attempt does not wait for it: not acquired, no error.
		ok, err := rw.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)

		type result struct {
			ok  bool
			err error
		}
		got := make(chan result, 1)
		go func() {
			ok, err := rw.TryLock(bg, 10*time.Second, 0)
			got <- result{ok, err}
		}()
		select {
		case r := <-got:
			t.Fatalf("TryLock returned (%v, %v) while the left read acquire was still being resolved", r.ok, r.err)
		case <-time.After(200 * time.Millisecond): // it waits, as it must: an event cannot show it
		}
		close(gc.open)
		select {
		case r := <-got:
			require.NoError(t, r.err)
			require.True(t, r.ok, "the read grant was given back: the lock was free")
		case <-time.After(10 * time.Second):
			t.Fatal("TryLock did not return once the read acquire was resolved")
		}
		require.NoError(t, rw.Unlock(bg))
		require.False(t, b.exists(t, rw.Key()))
	})
}
