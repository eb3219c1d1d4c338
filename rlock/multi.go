package rlock

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/backoff"
	"github.com/relock-go/relock/lua"
)

// execServed runs s as exec does and, while Redis answers that it cannot serve the script
// yet (unreachable, loading, busy, a slot being migrated, a Cluster failover: transient
// errors, which prove that nothing was applied), sends it again with jittered backoff (5 ms doubling
// up to 250 ms) until ctx ends; it then returns the last result. On Cluster rueidis
// refreshes its slot map after such an error, so a send after a failover reaches the
// promoted replica. For the requests that give something back (a release), which must not
// fail because of a passing outage while their cleanup timeout lasts.
func (c *Client) execServed(ctx context.Context, s *lua.Script, keys, args []string) rueidis.RedisResult {
	res := c.exec(ctx, s, keys, args)
	pauses := backoff.New(5*time.Millisecond, 250*time.Millisecond)
	// transient's errors.As targets escape: it is asked only about an error.
	for res.Error() != nil && transient(res.Error()) {
		if sleep(ctx, pauses.Next()) != nil {
			return res
		}
		res = c.exec(ctx, s, keys, args)
	}
	return res
}

// scriptCall is one script run of a pipeline (execMulti).
type scriptCall struct {
	s          *lua.Script
	keys, args []string
}

// execMulti runs calls in one pipeline (DoMulti): on Cluster rueidis sends each node its
// share together, one round trip per node however many slots the calls span, and follows
// MOVED and ASK per call. A call whose script the server lacks (NOSCRIPT) is sent again
// with its text; one whose shebang flags the server refuses (not compiled, so not run) is
// sent again without them. Results are in the order of calls.
func (c *Client) execMulti(ctx context.Context, calls []scriptCall) []rueidis.RedisResult {
	flags := c.flags.Load()
	res := c.rc.DoMulti(ctx, c.scriptCmds(calls, flags, nil, false)...)
	var missing []int
	for i, r := range res {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		again := c.rc.DoMulti(ctx, c.scriptCmds(calls, flags, missing, true)...)
		for j, i := range missing {
			res[i] = again[j]
		}
	}
	if !flags {
		return res
	}
	var refused []scriptCall
	var at []int
	for i, r := range res {
		// Only a script sent with flags can have been refused for them: miniredis words a
		// script's runtime errors as compile errors too, and a script that ran must not run
		// again.
		if calls[i].s.HasFlags() && lua.IsShebangError(r.Error()) {
			refused, at = append(refused, calls[i]), append(at, i)
		}
	}
	if len(refused) > 0 {
		// Not compiled, so not run: these go again without flags.
		c.flags.Store(false)
		for j, r := range c.execMulti(ctx, refused) {
			res[at[j]] = r
		}
	}
	return res
}

// scriptCmds builds the EVALSHA (or, with text, EVAL) commands of calls, or only of those
// at the indexes only when it is not nil.
func (c *Client) scriptCmds(calls []scriptCall, flags bool, only []int, text bool) rueidis.Commands {
	build := func(sc scriptCall) rueidis.Completed {
		f := flags && sc.s.HasFlags()
		if text {
			return c.rc.B().Eval().Script(sc.s.Text(f)).Numkeys(int64(len(sc.keys))).Key(sc.keys...).Arg(sc.args...).Build()
		}
		return c.rc.B().Evalsha().Sha1(sc.s.SHA1(f)).Numkeys(int64(len(sc.keys))).Key(sc.keys...).Arg(sc.args...).Build()
	}
	var cmds rueidis.Commands
	if only == nil {
		for _, sc := range calls {
			cmds = append(cmds, build(sc))
		}
		return cmds
	}
	for _, i := range only {
		cmds = append(cmds, build(calls[i]))
	}
	return cmds
}
