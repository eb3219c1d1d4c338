package rlock

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// RedLock.Err, Token and HoldContext say what Unlock says when the caller's owner holds no
// hold: ErrClosed once fewer than a majority of the Clients are open, also while the hold's
// entry is there with a count of 0 (an acquire of the owner under way). Before, that count
// of 0 said ErrNotHeld (note24: "RedLock.Err during a count of 0 says ErrNotHeld where Unlock
// would say ErrClosed").
func TestRedLock_errAtCountZeroAfterMajorityClosedIsErrClosed(t *testing.T) {
	var cs []*Client
	for range 3 {
		_, rc := redistest.Miniredis(t)
		c, err := New(rc)
		require.NoError(t, err)
		defer c.Close()
		cs = append(cs, c)
	}
	r := NewRedLock(t.Name(), cs)
	ctx := context.Background()
	owner, err := r.ownerOf(ctx)
	require.NoError(t, err)
	rh := r.refHold(owner) // an entry at count 0, as an acquire under way keeps it
	defer unrefRed(rh)
	require.ErrorIs(t, r.Err(ctx), ErrNotHeld, "all Clients open")
	require.NoError(t, cs[0].Close())
	require.NoError(t, cs[1].Close())
	require.ErrorIs(t, r.Unlock(ctx), ErrClosed, "Unlock")
	require.ErrorIs(t, r.Err(ctx), ErrClosed, "Err")
	_, err = r.Token(ctx)
	require.ErrorIs(t, err, ErrClosed, "Token")
	hctx, cancel := r.HoldContext(ctx)
	defer cancel()
	require.True(t, errors.Is(context.Cause(hctx), ErrClosed), "HoldContext's cause: %v", context.Cause(hctx))
}
