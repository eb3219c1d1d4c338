package rlock

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// redProbeTTL is how long the probe key of the duplicate-server check lives.
const redProbeTTL = 10 * time.Second

// probeKey is the key of c's probe (RedLock.verify), under c's key prefix: its ACL rule
// grants it. No lock of any kind uses the suffix ":probe".
func (c *Client) probeKey() string {
	return keysFor(c.opts.prefix, "redlock-probe:"+c.id).lock + ":probe"
}

// verify checks, once for every set of Clients (the result is kept by the set's first
// Client), that no two of the Clients reach the same server, with commands ACLRule grants:
// each instance writes its Client's id under a probe key of its own (SET PX redProbeTTL,
// its key prefix), then each reads the other instances' probe keys (GET); a key found on
// another instance's server means that both Clients reach one server (or servers that
// replicate each other), and the handle is invalid. Each step is bounded by tmo (its requests
// sent aside: leave); a server
// that does not answer leaves the check incomplete, and the next acquire runs it again. A
// pair that cannot be compared is not: an instance whose write is refused, a read refused
// (an ACL user of one prefix cannot read another prefix's key: two Clients with different
// key prefixes under ACL rules are not compared), and a closed Client, which never grants.
// Keys are per database: two Clients on one server in different databases (SelectDB) are not
// found (NewRedLock's godoc says so).
func (r *RedLock) verify(ctx context.Context, tmo time.Duration) error {
	if r.verified.Load() {
		return nil
	}
	first := r.insts[0].c
	if v, ok := first.redChecked.Load(r.set); ok {
		r.verified.Store(true)
		if err, _ := v.(error); err != nil {
			r.bad.CompareAndSwap(nil, &err)
			return err
		}
		return nil
	}
	n := len(r.insts)
	const (
		unknown = iota // no answer: the check is incomplete
		wrote
		refused // a reply that refuses: not compared
	)
	state := make([]int, n)
	r.each(func(i int, m *Mutex) {
		c := m.c
		if c.isClosed() {
			// Never grants: it cannot count one server twice. Its probe would fail without a
			// reply for good, and leave the check to every later acquire.
			state[i] = refused
			return
		}
		ictx, cancel := context.WithTimeout(ctx, tmo)
		defer cancel()
		// Aside (leave): on a connection where other requests wait, rueidis heeds no
		// deadline but a lone request's, and held the probe of a paused server until a
		// request of the Client's queued there before it timed out (the cleanup timeout;
		// TestRedLock_duplicateCheckOnASilentServerBoundedByTheInstanceTimeout). A probe
		// that lands later only writes a key that expires.
		err, answered := leave(ictx, func() error {
			return c.rc.Do(ictx, c.rc.B().Set().Key(c.probeKey()).Value(c.id).PxMilliseconds(redProbeTTL.Milliseconds()).Build()).Error()
		})
		if !answered {
			return // no answer: the check is incomplete
		}
		switch _, isReply := rueidis.IsRedisErr(err); {
		case err == nil:
			state[i] = wrote
		case isReply, c.isClosed(): // refused, or closed meanwhile
			state[i] = refused
		}
	})
	complete := !slices.Contains(state, unknown)
	var found [][2]int // pairs (writer, reader) on one server
	var mu sync.Mutex
	r.each(func(j int, m *Mutex) {
		if state[j] == unknown {
			return
		}
		c := m.c
		var who []int
		var cmds rueidis.Commands
		for i, o := range r.insts {
			if i != j && state[i] == wrote {
				who = append(who, i)
				cmds = append(cmds, c.rc.B().Get().Key(o.c.probeKey()).Build())
			}
		}
		if len(cmds) == 0 {
			return
		}
		if c.isClosed() { // closed since its write: it reads nothing, and never grants
			return
		}
		ictx, cancel := context.WithTimeout(ctx, tmo)
		defer cancel()
		ress, answered := leave(ictx, func() []rueidis.RedisResult { return c.rc.DoMulti(ictx, cmds...) })
		if !answered {
			mu.Lock()
			complete = false // no answer: asked again by the next acquire
			mu.Unlock()
			return
		}
		for k, res := range ress {
			v, err := res.ToString()
			_, isReply := rueidis.IsRedisErr(err)
			switch {
			case err == nil && v == r.insts[who[k]].c.id:
				mu.Lock()
				found = append(found, [2]int{who[k], j})
				mu.Unlock()
			case err == nil, rueidis.IsRedisNil(err), isReply, c.isClosed():
				// another value, none, or refused: not the same server, or not compared (a
				// reader closed meanwhile never grants)
			default:
				mu.Lock()
				complete = false // no answer: asked again by the next acquire
				mu.Unlock()
			}
		}
	})
	if len(found) > 0 {
		slices.SortFunc(found, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
		i, j := found[0][0], found[0][1]
		err := invalid("red lock %q: two of its Clients (%d and %d, by Client id) reach the same server (Client %d's probe key was found through Client %d): a red lock wants independent masters", r.name, min(i, j), max(i, j), i, j)
		first.redChecked.Store(r.set, err)
		r.bad.CompareAndSwap(nil, &err)
		return *r.bad.Load()
	}
	if complete {
		first.redChecked.Store(r.set, nil)
		r.verified.Store(true)
	}
	return nil
}
