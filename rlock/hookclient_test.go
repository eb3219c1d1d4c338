package rlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// scriptHook intercepts one call of one of relock's scripts, cmd (its script's name and
// arguments). call sends the command on for real, under the caller's ctx, at most once (it
// or cmd.sendWith): the hook may call it at once, later (from another goroutine: the
// command is not sent until then), or never (a reply that never comes, a refused dial),
// and answer what it likes.
type scriptHook func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult

// hookCall is what a scriptHook learns of a script call, read before anything is sent
// (rueidis recycles a command once sent).
type hookCall struct {
	// script is the script's name: its file name without .lua ("acquire", "release",
	// "renew", "fair_acquire", ...: lua.Script.Name).
	script string
	// args is a copy of the command's words after the script's SHA1 or text: the number of
	// keys, the keys, then the arguments.
	args []string
	// multi: the call came in a DoMulti pipeline (it is sent on as a Do of its own).
	multi bool
	// fast: the call is a fast grant's transaction (fast.go), named "acquire", its args as
	// acquire.lua's first send; its answer is EXEC's (the HSETNX's, PEXPIRE's and INCR's
	// answers), not the script's.
	fast bool
	// sendWith sends the command on for real under ctx instead of the caller's (for a send
	// made after the caller's ctx may have ended). The command is sent at most once: by
	// call or by sendWith, not both.
	sendWith func(ctx context.Context) rueidis.RedisResult
}

// hookClient is the one fault-injecting rueidis client of the tests that act on the
// scripts' sends and replies (hardening, review, protocol, model, faults, ghost, drift
// hunt, ...): every call of one of relock's scripts goes through its hook (none: straight
// on); every other command goes straight on. The recurring hooks are below, each a handle
// that embeds the hookClient it serves (loseReplies, refuseSends, keepSend, gateSend,
// holdReply, delayReplies, countScripts).
//
// A test's hookClient may be given to another (stacked): each sees what the one above
// sends on. A test that only watches the commands (every), scripts or not, uses one with
// no hook.
type hookClient struct {
	rueidis.Client
	hook atomic.Pointer[scriptHook]
	// every, when set before the client is used, sees the words of every command the caller
	// sends through h, script or not, before anything is sent: a Do's one command (multi
	// false), or a DoMulti's all, as one call (multi true). It must not keep them (rueidis
	// recycles a sent command). It changes nothing: with no hook set, a pipeline goes on
	// whole.
	every func(cmds [][]string, multi bool)
}

// set installs f as the hook (nil: none).
func (h *hookClient) set(f scriptHook) {
	if f == nil {
		h.hook.Store(nil)
		return
	}
	h.hook.Store(&f)
}

func (h *hookClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if h.every != nil {
		h.every([][]string{cmd.Commands()}, false)
	}
	return h.do(ctx, cmd, false)
}

func (h *hookClient) do(ctx context.Context, cmd rueidis.Completed, multi bool) rueidis.RedisResult {
	f := h.hook.Load()
	if f == nil {
		return h.Client.Do(ctx, cmd)
	}
	// Read before the command is sent: rueidis recycles a sent command.
	script, args := scriptOf(cmd)
	if script == "" {
		return h.Client.Do(ctx, cmd)
	}
	send := func(ctx context.Context) rueidis.RedisResult { return h.Client.Do(ctx, cmd) }
	c := hookCall{script: script, args: args, multi: multi, sendWith: send}
	return (*f)(ctx, c, func() rueidis.RedisResult { return send(ctx) })
}

// DoMulti sends a pipeline that holds a script as one Do per command, each through the hook
// (hookCall.multi set).
func (h *hookClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	if h.every != nil {
		words := make([][]string, len(cmds))
		for i, cmd := range cmds {
			words[i] = cmd.Commands()
		}
		h.every(words, true)
	}
	if args := fastGrantOf(cmds); args != nil {
		// A fast grant's transaction (fast.go) goes through the hook as one call of the
		// acquire script, its arguments as acquire.lua's first send: the faults of the tests
		// act on it as on the script it stands for. Its answer is EXEC's.
		f := h.hook.Load()
		if f == nil {
			return h.Client.DoMulti(ctx, cmds...)
		}
		out := make([]rueidis.RedisResult, len(cmds))
		// A send made after this call returned (a late delivery: cmd.sendWith from another
		// goroutine) must not write into out, which the caller reads: a data race under
		// -race in the CI proof at a92ba99 (the drift hunt's late fast grant).
		var mu sync.Mutex
		returned := false
		send := func(ctx context.Context) rueidis.RedisResult {
			res := h.Client.DoMulti(ctx, cmds...)
			mu.Lock()
			if !returned {
				copy(out, res[:len(res)-1])
			}
			mu.Unlock()
			return res[len(res)-1]
		}
		c := hookCall{script: "acquire", args: args, sendWith: send, fast: true}
		last := (*f)(ctx, c, func() rueidis.RedisResult { return send(ctx) })
		mu.Lock()
		defer mu.Unlock()
		returned = true
		out[len(out)-1] = last
		for i := range out[:len(out)-1] {
			if out[i] == (rueidis.RedisResult{}) {
				out[i] = out[len(out)-1]
			}
		}
		return out
	}
	hooked := false
	for _, cmd := range cmds {
		hooked = hooked || isRelockScript(cmd)
	}
	if !hooked || h.hook.Load() == nil {
		return h.Client.DoMulti(ctx, cmds...)
	}
	out := make([]rueidis.RedisResult, len(cmds))
	for i, cmd := range cmds {
		out[i] = h.do(ctx, cmd, true)
	}
	return out
}

// fastGrantOf returns, when cmds are a fast grant's transaction (MULTI; SET lock
// "~<owner> <seq>" NX PX <lease>; INCR fence; EXEC), the words acquire.lua's first send of the
// same acquire would carry after its SHA1 (2, lock, fence, lease, owner, seq); else nil.
func fastGrantOf(cmds []rueidis.Completed) []string {
	if len(cmds) != 4 {
		return nil
	}
	w := make([][]string, len(cmds))
	for i, c := range cmds {
		w[i] = c.Commands()
	}
	if !strings.EqualFold(w[0][0], "MULTI") || !strings.EqualFold(w[1][0], "SET") || len(w[1]) != 6 ||
		!strings.HasPrefix(w[1][2], "~") || len(w[2]) != 2 {
		return nil
	}
	owner, seq, ok := strings.Cut(w[1][2][1:], " ")
	if !ok {
		return nil
	}
	return []string{"2", w[1][1], w[2][1], w[1][5], owner, seq}
}

// scriptNames maps the SHA1 of both forms of every script (plain, and with its "#!lua flags"
// shebang), and both texts (for EVAL), to the script's name.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range lua.All() {
		flagged := sha1.Sum([]byte(s.Source()))
		m[s.PlainSHA1()] = s.Name()
		m[hex.EncodeToString(flagged[:])] = s.Name()
		m[s.Source()] = s.Name()
		m[s.PlainSource()] = s.Name()
	}
	return m
}()

// scriptOf is the name of the script cmd runs (EVALSHA or EVAL), or "", and a copy of the
// command's words after the script's SHA1 or text.
func scriptOf(cmd rueidis.Completed) (string, []string) {
	if !isRelockScript(cmd) {
		return "", nil
	}
	words := cmd.Commands()
	return scriptNames[words[1]], append([]string(nil), words[2:]...)
}

// isRelockScript reports whether cmd runs one of relock's scripts (EVALSHA or EVAL).
func isRelockScript(cmd rueidis.Completed) bool {
	words := cmd.Commands()
	if len(words) < 2 {
		return false
	}
	switch strings.ToUpper(words[0]) {
	case "EVALSHA", "EVAL":
		return scriptNames[words[1]] != ""
	}
	return false
}

// The recurring hooks. Each acts on the scripts a caller sends with Do, and lets the
// scripts of a pipeline (hookCall.multi) go straight on, as the wrappers they replace did
// (they faulted Do only).

// lostReplies is a hookClient whose scripts run for real but can have their replies lost,
// as to a timeout or a broken connection: the caller cannot tell whether the script took
// effect (loseReplies).
type lostReplies struct {
	*hookClient
	drop   atomic.Int32 // replies of applied scripts still to lose
	always atomic.Bool  // lose every script's reply, applied or not
	onDrop func()       // runs after a reply was lost (set before use)
}

// loseReplies wraps rc in a hookClient that loses script replies when told (drop, always).
func loseReplies(rc rueidis.Client) *lostReplies {
	l := &lostReplies{hookClient: &hookClient{Client: rc}}
	l.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi {
			return call()
		}
		res := call()
		if l.always.Load() || (res.Error() == nil && l.drop.Add(-1) >= 0) {
			if l.onDrop != nil {
				l.onDrop()
			}
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		return res
	})
	return l
}

// refusedSends is a hookClient that fails the next refuse scripts as a refused dial would,
// sending nothing (refuseSends).
type refusedSends struct {
	*hookClient
	refuse   atomic.Int32 // scripts still to refuse
	inFlight atomic.Int32 // scripts sent and not answered yet
}

// refuseSends wraps rc in a hookClient that refuses scripts when told (refuse).
func refuseSends(rc rueidis.Client) *refusedSends {
	r := &refusedSends{hookClient: &hookClient{Client: rc}}
	r.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi {
			return call()
		}
		r.inFlight.Add(1) // before the check: settle sees every script that passed it
		defer r.inFlight.Add(-1)
		if r.refuse.Add(-1) >= 0 {
			return refusedResult()
		}
		return call()
	})
	return r
}

// refuseAll refuses every script from now on and returns once no script sent before is
// still on its way: from then on, nothing of this Client's reaches Redis (pipelines aside).
func (r *refusedSends) refuseAll(t *testing.T) {
	t.Helper()
	r.refuse.Store(1 << 30)
	redistest.WaitFor(t, 10*time.Second, "the scripts sent before the refusal to be answered", func() bool { return r.inFlight.Load() == 0 })
}

// keptSend is a hookClient that keeps back the first script sent through it once armed
// (keepSend): it cancels the caller (cancel) and answers context.Canceled without sending
// it, as rueidis answers a caller whose ctx ended while its command waited to be written;
// with no cancel set it answers context.DeadlineExceeded, as for a request whose reply did
// not come within its deadline (the caller stays). deliver sends the kept command
// afterwards, as a connection slower than the replay's would: rueidis spreads a standalone
// client's commands over several connections (PipelineMultiplex, chosen at random per
// command), so nothing orders a replay after the send it replays.
type keptSend struct {
	*hookClient
	armed  atomic.Bool
	cancel context.CancelFunc // set before armed, or nil
	kept   chan func(context.Context) rueidis.RedisResult
}

// keepSend wraps rc in a hookClient that keeps back a script when armed.
func keepSend(rc rueidis.Client) *keptSend {
	k := &keptSend{hookClient: &hookClient{Client: rc}, kept: make(chan func(context.Context) rueidis.RedisResult, 1)}
	k.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi || !k.armed.CompareAndSwap(true, false) {
			return call()
		}
		k.kept <- cmd.sendWith
		if k.cancel == nil {
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		k.cancel()
		return rueidis.NewErrorResult(context.Canceled)
	})
	return k
}

// sentNext is a hookClient that tells when, once armed, the next command goes out, script
// or not (sent is closed): a test pauses Redis, arms it, makes the call under test and waits
// for its request to be on the wire before it ends the call's ctx.
type sentNext struct {
	*hookClient
	armed atomic.Bool
	sent  chan struct{}
}

// watchNextSend wraps rc in a sentNext.
func watchNextSend(rc rueidis.Client) *sentNext {
	n := &sentNext{sent: make(chan struct{})}
	n.hookClient = &hookClient{Client: rc, every: func([][]string, bool) {
		if n.armed.CompareAndSwap(true, false) {
			close(n.sent)
		}
	}}
	return n
}

// deliver sends the kept script now (waiting for it to be kept) and requires no error.
func (k *keptSend) deliver(t *testing.T) {
	t.Helper()
	send := <-k.kept
	require.NoError(t, send(context.Background()).Error())
}

// gatedSend is a hookClient that holds the next script sent through it once armed, before
// it is sent, until open is closed; held is closed when it arrives (gateSend).
type gatedSend struct {
	*hookClient
	armed      atomic.Bool
	held, open chan struct{}
	// wire, set before use: the held script is then sent without the caller's cancel, as one
	// on the wire already when the caller's ctx ended, whose answer came all the same.
	wire bool
}

// gateSend wraps rc in a hookClient that holds a script's send when armed.
func gateSend(rc rueidis.Client) *gatedSend {
	g := &gatedSend{hookClient: &hookClient{Client: rc}, held: make(chan struct{}), open: make(chan struct{})}
	g.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !cmd.multi && g.armed.CompareAndSwap(true, false) {
			close(g.held)
			<-g.open
			if g.wire {
				return cmd.sendWith(context.WithoutCancel(ctx))
			}
		}
		return call()
	})
	return g
}

// heldReply is a hookClient that holds back the reply of the first script sent through it
// once armed (holdReply): the script runs in Redis at once, whatever becomes of the
// caller's ctx (sent is closed then), and its reply reaches the caller once open is
// closed, as a slow connection would deliver it.
type heldReply struct {
	*hookClient
	armed      atomic.Bool
	sent, open chan struct{}
}

// holdReply wraps rc in a hookClient that holds back a script's reply when armed.
func holdReply(rc rueidis.Client) *heldReply {
	h := &heldReply{hookClient: &hookClient{Client: rc}, sent: make(chan struct{}), open: make(chan struct{})}
	h.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi || !h.armed.CompareAndSwap(true, false) {
			return call()
		}
		res := cmd.sendWith(context.WithoutCancel(ctx))
		close(h.sent)
		<-h.open
		return res
	})
	return h
}

// delayedReplies is a hookClient that hands back the replies of scripts delay after they
// came, once on is closed, as a slow network would (delayReplies).
type delayedReplies struct {
	*hookClient
	delay time.Duration
	on    chan struct{} // closed: delays
}

// delayReplies wraps rc in a hookClient that delays script replies by delay once on.
func delayReplies(rc rueidis.Client, delay time.Duration) *delayedReplies {
	d := &delayedReplies{hookClient: &hookClient{Client: rc}, delay: delay, on: make(chan struct{})}
	d.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		res := call()
		if !cmd.multi {
			select {
			case <-d.on:
				time.Sleep(d.delay)
			default:
			}
		}
		return res
	})
	return d
}

// answerAfter is a hook's step for a Redis slow to answer: it sends the call on once d has
// passed, unless ctx (the call's) ends first, when the call is not sent and its result is
// ctx's error.
func answerAfter(ctx context.Context, d time.Duration, call func() rueidis.RedisResult) rueidis.RedisResult {
	select {
	case <-time.After(d):
		return call()
	case <-ctx.Done():
		return rueidis.NewErrorResult(ctx.Err())
	}
}

// scriptCount is a hookClient that counts the scripts sent through it (countScripts).
type scriptCount struct {
	*hookClient
	n   atomic.Int64 // scripts sent
	ran atomic.Int64 // of those, the ones not answered NOSCRIPT (a script run, or refused by it)
}

// countScripts wraps rc in a hookClient that counts the scripts sent through it.
func countScripts(rc rueidis.Client) *scriptCount {
	s := &scriptCount{hookClient: &hookClient{Client: rc}}
	s.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi {
			return call()
		}
		s.n.Add(1)
		res := call()
		if re, ok := rueidis.IsRedisErr(res.Error()); !ok || !re.IsNoScript() {
			s.ran.Add(1)
		}
		return res
	})
	return s
}
