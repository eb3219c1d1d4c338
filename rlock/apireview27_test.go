package rlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// HoldContext with a nil ctx is refused as every method refuses it (DESIGN 14): the context
// it returns is already cancelled, with a cause wrapping ErrInvalid, also while the handle's
// owner holds the lock. (Before, HoldContext took a nil ctx for context.Background and
// returned a live context of the hold, while Done(nil) returned a closed channel and
// Err(nil) ErrInvalid.)
func TestAPIReview_holdContextNilCtxIsInvalidWhileHeld(t *testing.T) {
	newClient := func() *rlock.Client {
		_, rc := redistest.Miniredis(t)
		c, err := rlock.New(rc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := newClient()
	rw := c.RWMutex("rw")
	red := rlock.NewRedLock("red", []*rlock.Client{c, newClient(), newClient()})
	type holder interface {
		Lock(context.Context) error
		Unlock(context.Context) error
		HoldContext(context.Context) (context.Context, context.CancelFunc)
	}
	for name, l := range map[string]holder{
		"Mutex":      c.Mutex("m"),
		"FairMutex":  c.FairMutex("f"),
		"SpinMutex":  c.SpinMutex("s"),
		"RWMutex":    rw,
		"ReadLocker": rw.RLocker(),
		"RedLock":    red,
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, l.Lock(bg))
			defer func() { require.NoError(t, l.Unlock(bg)) }()
			live, stop := l.HoldContext(bg)
			require.NoError(t, live.Err())
			stop()
			hctx, cancel := l.HoldContext(noCtx)
			defer cancel()
			require.Error(t, hctx.Err(), "HoldContext(nil) is live")
			require.ErrorIs(t, context.Cause(hctx), rlock.ErrInvalid)
		})
	}
}
