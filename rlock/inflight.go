package rlock

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// A first send that the caller may leave. rueidis sends a lone request whose context has a
// deadline on the caller's goroutine and heeds only that deadline, not a cancel (a context
// cancelled before its deadline, or one given a deadline to stay on that fast path): a caller
// waiting on it would outlive its ctx while Redis does not answer (README guarantee 6). So a
// call whose ctx can end sends its first request from a goroutine of its own, on a context
// that keeps ctx's values and is bounded by the cleanup timeout (a sendCtx), and
// waits for the answer or ctx's end, whichever comes first. A caller that leaves hands the
// send over to the work that resolves it (Mutex.later, semaphores' background), which waits
// for the send's answer before it replays: a replay never overtakes its own first send.

// inflight is one such send. Its fields are the send's inputs (copied: the caller's buffers
// are reused by its next attempt) and its outcome, written before done is signalled. It is
// never reused: its context (sc) may still be read by contexts rueidis derived from it after
// the answer. An acquisition's first attempt uses one in the acquisition's own memory
// (attemptBuf.first: one allocation fewer), the later ones allocate theirs.
type inflight struct {
	c    *Client
	ctx  context.Context
	stop context.CancelFunc
	sc   sendCtx // ctx, as a rule: a first send's context without an allocation of its own
	s    *lua.Script
	kv   [8]string
	keys []string
	args []string
	// acquire selects execAcquire (vals, acked) rather than exec (res); fastVal, when set,
	// execFast (vals, isFast).
	acquire bool
	fastVal string
	pub     string // the lock's release channel (execFast's give-back tells its waiters)
	isFast  bool
	cmds    [4]rueidis.Completed // execFast's

	res   rueidis.RedisResult
	buf   [4]int64
	vals  []int64
	acked int64
	err   error
	done  chan struct{} // receives once when the outcome is written
}

// send starts s with keys and args on a goroutine of its own; it returns the send, whose
// outcome await and wait give. The send's context keeps ctx's values and ends at sent plus
// the cleanup timeout, or with the Client (Close; rueidis may heed only the deadline).
//
// fastVal, when set, sends an acquire as a fast grant (execFast), pub its lock's release
// channel as the scripts take it. into, when not nil, is
// zeroed memory of the caller's for the send, never used before.
func (c *Client) send(ctx context.Context, sent time.Time, acquire bool, s *lua.Script, keys, args []string, fastVal, pub string, into *inflight) *inflight {
	f := into
	if f == nil {
		f = new(inflight)
	}
	f.c, f.s, f.acquire, f.fastVal, f.pub, f.done = c, s, acquire, fastVal, pub, make(chan struct{}, 1)
	if len(keys)+len(args) <= len(f.kv) {
		n := copy(f.kv[:], keys)
		copy(f.kv[n:], args)
		f.keys, f.args = f.kv[:n:n], f.kv[n:n+len(args):n+len(args)]
	} else {
		f.keys, f.args = append([]string(nil), keys...), append([]string(nil), args...)
	}
	f.ctx, f.stop = c.firstSendCtxIn(ctx, sent, &f.sc)
	go f.run()
	return f
}

func (f *inflight) run() {
	if f.fastVal != "" {
		f.vals, f.isFast, f.err = f.c.execFast(f.ctx, f.s, f.keys, f.args, f.fastVal, f.pub, &f.cmds, f.buf[:0])
	} else if f.acquire {
		f.vals, f.acked, f.err = f.c.execAcquire(f.ctx, f.s, f.keys, f.args, f.buf[:0])
	} else {
		f.res = f.c.exec(f.ctx, f.s, f.keys, f.args)
		f.err = f.res.Error()
	}
	f.stop()
	f.done <- struct{}{}
}

// await waits for the send's outcome or ctx's end. It reports false when ctx ended first:
// the send is then still under way, and the caller must hand it over (wait).
func (f *inflight) await(ctx context.Context) bool {
	select {
	case <-f.done:
		return true
	case <-ctx.Done():
		select { // an answer that is there already is taken
		case <-f.done:
			return true
		default:
			return false
		}
	}
}

// awaitOpen is await that also reports false when the Client's Close comes first: the send is
// then still under way, and must be handed over (wait) as when the caller leaves.
func (f *inflight) awaitOpen(ctx context.Context) bool {
	select {
	case <-f.done:
		return true
	case <-ctx.Done():
	case <-f.c.life.Done():
	}
	select { // an answer that is there already is taken
	case <-f.done:
		return true
	default:
		return false
	}
}

// wait waits for the send's outcome, or the Client's Close (work in the background must not
// outlast Close, and rueidis may not heed the send's context). It reports false when Close
// came first: the outcome is unknown, and the send is left to end on its own.
func (f *inflight) wait() bool {
	select {
	case <-f.done:
		return true
	case <-f.c.life.Done():
		return false
	}
}

// aside runs f on a goroutine of its own while the caller waits for it, for ctx's end, or
// for leaveAt (nil: never) to close, and returns f's result when the caller got it (also a
// result that is there already as the caller leaves), else a channel that will deliver it:
// the caller left, and f goes on until its own ctx ends. rueidis may hold a request past its
// ctx's end (it heeds only a lone request's deadline, or a connection it is still dialling):
// the caller need not wait for it (README guarantee 6). A ctx that cannot end, with no
// leaveAt, runs f on the caller's goroutine. Whoever gets the channel must read it, or drop
// what f's result holds (a grant) knowingly.
func aside[T any](ctx context.Context, leaveAt <-chan struct{}, f func() T) (T, <-chan T) {
	if ctx.Done() == nil && leaveAt == nil {
		return f(), nil
	}
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
	case <-leaveAt:
	}
	select { // a result that is there already is taken
	case v := <-ch:
		return v, nil
	default:
		var zero T
		return zero, ch
	}
}

// leave runs f, a read that changes nothing, aside (above) and returns its result, or false
// when ctx ends first: f goes on until its own ctx ends and its result is dropped.
func leave[T any](ctx context.Context, f func() T) (T, bool) {
	v, pending := aside(ctx, nil, f)
	return v, pending == nil
}
