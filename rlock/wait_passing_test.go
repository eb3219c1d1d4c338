package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// endedUnseenCtx is a context whose Err turns to Canceled (end) before its Done closes
// (lag later): the loop's sleep has woken for an attempt (its timer fired) and the context
// ends before the attempt's own check, so that the attempt, not the sleep's select, sees
// the end. (In a real run the window is the few instructions between the two; here it is
// lag.)
type endedUnseenCtx struct {
	context.Context
	done  chan struct{}
	ended atomic.Bool
}

func newEndedUnseenCtx() *endedUnseenCtx {
	return &endedUnseenCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *endedUnseenCtx) end(lag time.Duration) {
	if c.ended.CompareAndSwap(false, true) {
		time.AfterFunc(lag, func() { close(c.done) })
	}
}

func (c *endedUnseenCtx) Done() <-chan struct{} { return c.done }
func (c *endedUnseenCtx) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

// A wait that rode out passing failures (here refused dials) and then ends at its ctx's end
// reports ctx's error joined with the last passing failure, whether the sleep's select sees
// the end or the attempt's check that sends nothing once ctx has ended. Before, the second
// path returned the ctx's error alone (the refused dial dropped): errors.Is(err,
// ECONNREFUSED) was false for every kind below.
func TestWait_ctxEndSeenByAnAttemptKeepsThePassingFailure(t *testing.T) {
	// The kinds whose attempt checks ctx before sending. (The Semaphores' attempts have no such
	// check: ctx's end reaches them through the send, semRun, which this ctx's late Done does
	// not model.)
	kinds := map[string]func(c *rlock.Client, name string) func(context.Context) error{
		"Mutex":     func(c *rlock.Client, name string) func(context.Context) error { return c.Mutex(name).Lock },
		"FairMutex": func(c *rlock.Client, name string) func(context.Context) error { return c.FairMutex(name).Lock },
		"SpinMutex": func(c *rlock.Client, name string) func(context.Context) error { return c.SpinMutex(name).Lock }, // spinLoop
	}
	b := realBackend(t)
	for kind, lock := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			hc, c := hardSetup(t, b)
			ctx := newEndedUnseenCtx()
			var refused atomic.Int32
			hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if cmd.script == "release" || cmd.script == "renew" {
					return call()
				}
				if refused.Add(1) == 3 {
					// ctx ends at the third refusal, its Done a second later: the sleep after
					// this attempt wakes by its timer, and the next attempt finds ctx ended
					// before it sends anything (Mutex.attempt's check).
					ctx.end(time.Second)
				}
				return refusedResult() // a refused dial: a passing failure, nothing sent
			})
			start := time.Now()
			err := lock(c, redistest.Name(t))(ctx)
			took := time.Since(start)
			require.ErrorIs(t, err, context.Canceled)
			require.Less(t, took, time.Second, "the attempt, not the select on Done, saw the end")
			require.True(t, errors.Is(err, syscall.ECONNREFUSED), "the last passing failure (a refused dial) is not in the error: %v", err)
		})
	}
}
