package rlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/relock-go/relock/watchdog"
)

type holdKey struct{ lock, owner string }

// tableKey names a lock in the Client's tables (holds, hand-off candidates): its key, and the
// variant's suffix where two variants share the key (a read-write lock's two sides).
func tableKey(keys lockKeys, v *variant) string { return keys.lock + v.holdSuffix }

// hold is this Client's view of one owner's holds on one lock. It lives in Client.holds
// while an operation on it is running or it holds at least one hold.
type hold struct {
	c     *Client
	keys  lockKeys
	v     *variant
	owner string
	refs  int // operations in progress; guarded by c.mu

	op sync.Mutex // serializes this owner's scripts on this lock (request ids stay exact)

	mu    sync.Mutex // guards the fields below
	count int        // holds taken through this Client and not given back
	lost  error      // non-nil: the tenure was lost while count > 0; Lock refuses until count is 0
	cur   *tenure    // the current tenure, nil when not held
}

// tenure is one continuous possession of a lock, from a fresh grant to the release of the
// last hold, a loss, or Close.
type tenure struct {
	ctx    context.Context // cancelled, with the cause, when the tenure ends
	cancel context.CancelCauseFunc

	smu   sync.Mutex
	subs  map[*func(error)]struct{} // HoldContext cancels, called as the tenure ends
	ended error                     // why it ended; nil while it lasts
	token int64
	lease *watchdog.Lease
	renew bool
	end   time.Time // conservative end of the lease as last granted (fixed leases)
}

// ref returns the hold of (keys, owner), creating it, and counts an operation on it.
func (c *Client) ref(keys lockKeys, v *variant, owner string) (*hold, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	k := holdKey{tableKey(keys, v), owner}
	h := c.holds[k]
	if h == nil {
		h = &hold{c: c, keys: keys, v: v, owner: owner}
		c.holds[k] = h
	}
	h.refs++
	return h, nil
}

// peek returns the hold of (keys, owner) if there is one, without counting.
func (c *Client) peek(keys lockKeys, v *variant, owner string) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[holdKey{tableKey(keys, v), owner}]
}

// unref ends an operation on h and forgets h once nothing refers to it.
func (c *Client) unref(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	h.mu.Lock()
	idle := h.count == 0 && h.cur == nil
	h.mu.Unlock()
	if idle {
		delete(c.holds, holdKey{tableKey(h.keys, h.v), h.owner})
	}
}

// granted records a hold granted by a request sent at sent, with the lease it asked for;
// holds is the owner's hold count in Redis after the grant. A fresh grant (holds 1) while
// this Client still counts holds of the owner means the earlier tenure was lost unnoticed:
// granted then ends it as lost and returns an error wrapping ErrLockLost, recording nothing.
func (h *hold) granted(token, holds int64, sent time.Time, lease time.Duration, renew bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if holds == 1 && h.count > 0 {
		cause := fmt.Errorf("%w: it was gone from Redis when the owner re-entered", ErrLockLost)
		if h.cur != nil {
			h.stopLease()
			h.endLocked(cause)
		} else if h.lost == nil {
			h.lost = cause
		}
		return cause
	}
	t := h.cur
	fresh := t == nil
	if fresh {
		ctx, cancel := context.WithCancelCause(context.Background())
		t = &tenure{ctx: ctx, cancel: cancel, token: token}
	}
	end := sent.Add(lease - watchdog.Drift(lease))
	if !fresh && (t.renew || (!renew && !end.After(t.end))) {
		h.count++
		return nil // the lease in force already covers this hold
	}
	// A fresh tenure, or a re-entry that extends a fixed lease or turns the watchdog on.
	l := &watchdog.Lease{TTL: lease, Renew: renew, Data: h}
	l.OnLost = func(cause error) { h.onLost(l, cause) }
	if err := h.c.wd.Add(l, sent); err != nil {
		if !fresh {
			// The re-entry's own lease ran out before its reply came back: the lease in
			// force still covers the hold.
			h.count++
			return nil
		}
		// The grant came back after its lease had run out on this clock (Redis stalled),
		// or the Client is closing: it is of no use and not recorded.
		t.finish(ErrNotHeld)
		return fmt.Errorf("%w: %w", errLateGrant, err)
	}
	if t.lease != nil {
		h.c.wd.Remove(t.lease)
	}
	t.renew, t.end, t.lease = renew, end, l
	h.cur = t
	h.count++
	return nil
}

// errLateGrant: a grant arrived too late to be used; the caller gives it back.
var errLateGrant = errors.New("rlock: grant arrived after its lease")

// onLost runs on a watchdog goroutine when lease l was lost.
func (h *hold) onLost(l *watchdog.Lease, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil || h.cur.lease != l {
		return
	}
	h.cur.lease = nil
	if !h.cur.renew && errors.Is(cause, watchdog.ErrExpired) {
		// A fixed lease ran its course: the holds are over, nothing was lost.
		h.count = 0
		h.endLocked(ErrLeaseExpired)
		return
	}
	h.endLocked(fmt.Errorf("%w: %w", ErrLockLost, cause))
}

// released records that Redis reports remaining holds for the owner after a release (0 when
// the lock was freed, -1 when the owner held none).
func (h *hold) released(remaining int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count > 0 {
		h.count--
	}
	if remaining <= 0 {
		h.count = 0
	}
	if h.count == 0 {
		h.lost = nil
		if h.cur != nil {
			cause := ErrNotHeld
			if remaining < 0 {
				cause = fmt.Errorf("%w: Redis no longer had it at unlock", ErrLockLost)
			}
			h.stopLease()
			h.endLocked(cause)
		}
	}
}

// end ends the current tenure, if any, with cause.
func (h *hold) end(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != nil {
		h.stopLease()
		h.endLocked(cause)
	}
}

func (h *hold) stopLease() {
	if h.cur.lease != nil {
		h.c.wd.Remove(h.cur.lease)
		h.cur.lease = nil
	}
}

// endLocked ends the current tenure with cause. h.mu must be held.
func (h *hold) endLocked(cause error) {
	t := h.cur
	h.cur = nil
	if h.count > 0 && errors.Is(cause, ErrLockLost) {
		h.lost = cause
	}
	t.finish(cause)
}

// finish cancels the tenure's context and, before it returns, every context HoldContext
// derived from it, all with cause: a caller that learns of the end (Unlock returned) finds
// the cause already set, whatever it does next.
func (t *tenure) finish(cause error) {
	t.smu.Lock()
	t.ended = cause
	subs := t.subs
	t.subs = nil
	t.smu.Unlock()
	t.cancel(cause)
	for f := range subs {
		(*f)(cause)
	}
}

// subscribe arranges for f to be called with the cause when the tenure ends (at once if it
// has ended) and returns a function that cancels the arrangement.
func (t *tenure) subscribe(f func(error)) (stop func()) {
	t.smu.Lock()
	if t.ended != nil {
		cause := t.ended
		t.smu.Unlock()
		f(cause)
		return func() {}
	}
	if t.subs == nil {
		t.subs = make(map[*func(error)]struct{})
	}
	key := &f
	t.subs[key] = struct{}{}
	t.smu.Unlock()
	return func() {
		t.smu.Lock()
		delete(t.subs, key)
		t.smu.Unlock()
	}
}

// holds is the number of holds this Client counts for the owner.
func (h *hold) holds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// snapshot returns the current tenure and the loss that blocks re-entry, if any.
func (h *hold) snapshot() (*tenure, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.lost
}
