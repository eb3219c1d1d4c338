package rlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// review22: WithOwner's godoc: for a nil ctx, "every method of this package that takes it (or a
// context derived from it) returns an error wrapping ErrInvalid ... nothing is sent to Redis".
// A context derived from it by WithOwner (or WithNewOwner) replaces the owner key's *ownerErr
// with an id: ctxError (owner.go) no longer sees it, and the calls go on with a cancelled ctx.
func TestReview22_withOwnerNilParentReOwned(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	var nilCtx context.Context
	for what, ctx := range map[string]context.Context{
		"WithOwner(WithOwner(nil))":    rlock.WithOwner(rlock.WithOwner(nilCtx, "a"), "b"),
		"WithNewOwner(WithOwner(nil))": c.WithNewOwner(rlock.WithOwner(nilCtx, "a")),
	} {
		name := redistest.Name(t)
		for op, err := range map[string]error{
			"Mutex.Lock":        c.Mutex(name).Lock(ctx),
			"Mutex.Unlock":      c.Mutex(name).Unlock(ctx),
			"Semaphore.Release": c.Semaphore(name).Release(ctx, 1),
			"Latch.CountDown":   c.CountDownLatch(name).CountDown(ctx),
		} {
			assert.ErrorIs(t, err, rlock.ErrInvalid, "%s: %s: %v", what, op, err)
		}
	}
	msg := srv.Do(t, "DBSIZE")
	n, _ := msg.AsInt64()
	assert.Zero(t, n, "keys written")
}
