package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Lock whose ctx ends while it waits, walked across the lock kinds (Mutex.Lock case 1: "ctx's
// error, wrapped, when ctx ends first; nothing is left held or queued in Redis"; FairMutex: a
// waiter that gives up "removes its place at once, before Lock or TryLock returns"; RWMutex:
// a writer that gives up "withdraws its claim before returning"; README guarantee 6: within
// 100ms of ctx's end). After it: no fair place, no writer's claim, Err ErrNotHeld, the
// Client's table of holds empty; when the holder unlocks the lock is free (no waiter left
// behind takes it), and the former waiter's single attempt gets it.
func TestContracts_lockCancelledWhileWaitingLeavesNothing(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			lname := redistest.Name(t)
			holder := k.make(b.client(t), lname)
			if k.name == "RWMutex.read" {
				// Readers are kept out by a write hold.
				holder = b.client(t).RWMutex(lname)
			}
			require.NoError(t, holder.Lock(bg))
			wc := b.client(t)
			w := k.make(wc, lname)
			stalled := watchStalls(nil)
			ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			defer cancel()
			err := w.Lock(ctx)
			dl, _ := ctx.Deadline()
			now := time.Now()
			late, stall := now.Sub(dl), stalled(dl, now)
			require.True(t, errors.Is(err, context.DeadlineExceeded), "Lock: %v", err)
			// 100ms + a loaded machine, less what this process stalled meanwhile (the parallel
			// subtests under -race: a stall of the process is no late return of Lock's).
			require.Less(t, late-stall, 250*time.Millisecond, "Lock outlived its ctx by %v (the process stalled %v of it)",
				late.Round(time.Millisecond), stall.Round(time.Millisecond))
			// Nothing queued is left once the background work is done (Lock's case 1): a leave
			// that Redis did not answer within 100ms goes on in the background (FairMutex's
			// godoc), which a loaded machine makes likely (":queue left behind" under a
			// SIGSTOP pattern of 250ms every 500ms, helper flaky23).
			redistest.WaitFor(t, 5*time.Second, "the waiter's places to go", func() bool {
				left := ""
				for _, suffix := range []string{":queue", ":alive", ":writers"} {
					msg, err := b.do(t, "ZCARD", wc.Mutex(lname).Key()+suffix)
					require.NoError(t, err)
					if n, _ := msg.AsInt64(); n != 0 {
						left += suffix + " "
					}
				}
				return left == ""
			})
			require.ErrorIs(t, w.Err(bg), rlock.ErrNotHeld)
			redistest.WaitFor(t, 2*time.Second, "the waiter's hold entry to go", func() bool { return rlock.HoldEntries(wc) == 0 })

			require.NoError(t, holder.Unlock(bg))
			time.Sleep(50 * time.Millisecond) // a waiter left behind would take it now
			l, err := b.client(t).RWMutex(lname).IsLocked(bg)
			if k.name != "RWMutex.write" && k.name != "RWMutex.read" {
				l, err = b.client(t).Mutex(lname).IsLocked(bg)
			}
			require.NoError(t, err)
			require.False(t, l, "the lock is held after its holder unlocked")
			ok, err := w.TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, w.Unlock(bg))
		})
	}
}
