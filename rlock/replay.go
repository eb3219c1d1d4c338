package rlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/backoff"
	"github.com/relock-go/relock/lua"
)

// Replays: a request whose outcome is unknown (its reply lost) is sent again, under the same
// sequence number marked as a replay's, until Redis answers; the scripts answer a number
// applied already from the state they find (docs/DESIGN.md, section 5).

// spentMark starts the request id of an acquire's replay (spentMark in lib_fence.lua): the
// script spends the id, so that the request's first send, if it reaches Redis after the
// replay (rueidis spreads a client's commands over several connections: nothing orders a
// replay after the send it replays), grants nothing. Without it, a first send that the
// caller had given up on could take the lock afresh after the replay's grant was given back:
// a hold nobody records or renews, blocking every other owner until its lease ends.
const spentMark = "+"

// spentGone starts the permit id of a permit acquire's resend sent after its caller has gone
// (spentAlways in lib_spent.lua): the id is spent even if the resend is refused.
const spentGone = "!"

// replayArgs returns an acquire script's ARGV (lease, owner, request id, ...) as its replays
// send them: the request id marked as a replay's (spentMark). args is left as it is.
func replayArgs(args []string) []string { return replayArgsAt(args, 2) }

// replayArgsAt is replayArgs for a script whose request id is args[i].
func replayArgsAt(args []string, i int) []string {
	r := append([]string(nil), args...)
	r[i] = spentMark + r[i]
	return r
}

// replay re-sends a script whose first send failed with first (not a Redis reply) until it
// gets the script's answer from Redis or ctx ends. The scripts answer a replayed request id
// without applying it twice. An error reply in which Redis declines to run the replay (BUSY,
// LOADING, READONLY, ...) is no answer: the first send may have been applied all the same,
// so replaying goes on. While Redis cannot even be reached, replaying stops early once the
// caller's own context (caller, may be nil) has ended: it could go on for the whole cleanup
// timeout for nothing, and the caller is owed a prompt answer. ctx must come from
// cleanupCtx: replaying then also stops when the Client is closed, and when the rueidis
// client is; the error then wraps ErrClosed (and ErrUnknownOutcome).
//
// site names the request for the observer's Replay event, told once the replaying ends.
func (c *Client) replay(ctx, caller context.Context, site replaySite, s *lua.Script, keys, args []string, first error) (rueidis.RedisResult, error) {
	res, _, err := c.replayAt(ctx, caller, site, s, keys, args, first)
	return res, err
}

// replayAt is replay that also returns when the send that was answered left.
func (c *Client) replayAt(ctx, caller context.Context, site replaySite, s *lua.Script, keys, args []string, first error) (res rueidis.RedisResult, at time.Time, err error) {
	if o := c.obs; o != nil && site.kind != "" {
		sends := 1 // the first send
		defer func() {
			o.replay(ReplayInfo{Kind: site.kind, Name: site.name, Owner: site.owner, Op: site.op, Sends: sends, Err: err})
		}()
		return c.replayLoop(ctx, caller, s, keys, args, first, &sends)
	}
	return c.replayLoop(ctx, caller, s, keys, args, first, nil)
}

// replayLoop is replayAt; sends, when not nil, counts the sends.
func (c *Client) replayLoop(ctx, caller context.Context, s *lua.Script, keys, args []string, first error, sends *int) (rueidis.RedisResult, time.Time, error) {
	rctx, cancel := context.WithCancelCause(ctx) // ctx is a cleanupCtx: it ends with Close
	defer cancel(nil)
	pauses := backoff.New(5*time.Millisecond, 250*time.Millisecond)
	last := first
	unknown := func() (rueidis.RedisResult, time.Time, error) {
		return rueidis.RedisResult{}, time.Time{}, errorf("%w: %w (last error: %w)", ErrUnknownOutcome, context.Cause(rctx), last)
	}
	for {
		if errors.Is(last, rueidis.ErrClosing) {
			return rueidis.RedisResult{}, time.Time{}, errorf("%w: %w: the rueidis client is closed (%w)", ErrUnknownOutcome, ErrClosed, last)
		}
		if err := sleep(rctx, pauses.Next()); err != nil {
			return unknown()
		}
		sent := time.Now()
		if sends != nil {
			*sends++
		}
		res := c.exec(rctx, s, keys, args)
		err := res.Error()
		if re, isReply := rueidis.IsRedisErr(err); err == nil || isReply && answers(re) {
			return res, sent, err
		}
		// A replay that could not even be sent (a refused dial) says nothing of the first
		// send: keep trying, unless the caller has gone.
		if rctx.Err() == nil {
			last = err
		}
		if caller != nil && caller.Err() != nil && transient(err) {
			cancel(caller.Err())
			return unknown()
		}
	}
}
