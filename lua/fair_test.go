package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// fairRig runs the fair lock's scripts on one server, on the keys of one lock.
type fairRig struct {
	t     *testing.T
	c     rueidis.Client
	flags bool
	msgs  chan string // messages published on the lock's channel
	req   int
}

const (
	fLock, fFence, fQueue, fAlive = "{f}", "{f}:fence", "{f}:queue", "{f}:alive"
	fRel, fChan                   = "{f}:rel", "{f}:released"
	fWait, fBeat                  = 10000, 3000 // waiter timeout, heartbeat (ms)
)

func newFairRig(t *testing.T, c rueidis.Client, flags bool) *fairRig {
	r := &fairRig{t: t, c: c, flags: flags, msgs: make(chan string, 64)}
	dc, cancel := c.Dedicate()
	t.Cleanup(cancel)
	dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		select {
		case r.msgs <- m.Message:
		default:
		}
	}})
	if err := dc.Do(context.Background(), dc.B().Subscribe().Channel(fChan).Build()).Error(); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	redistest.WaitFor(t, 5*time.Second, "the subscription", func() bool {
		arr, _ := r.do("PUBSUB", "NUMSUB", fChan).ToArray()
		n := int64(0)
		if len(arr) == 2 {
			n, _ = arr[1].AsInt64()
		}
		return n == 1
	})
	return r
}

func (r *fairRig) do(args ...string) rueidis.RedisResult {
	r.t.Helper()
	res := r.c.Do(context.Background(), r.c.B().Arbitrary(args...).Build())
	if err := res.NonRedisError(); err != nil {
		r.t.Fatalf("%v: %v", args, err)
	}
	return res
}

func (r *fairRig) run(s *lua.Script, keys []string, args ...string) rueidis.RedisResult {
	return s.Lua(r.flags && s.HasFlags()).Exec(context.Background(), r.c, keys, args)
}

// acquire runs fair_acquire for owner with a fresh request id (or req, when given).
func (r *fairRig) acquire(owner string, join bool, req ...string) []int64 {
	r.t.Helper()
	r.req++
	id := "r" + strconv.Itoa(r.req)
	if len(req) > 0 {
		id = req[0]
	}
	flag := "0"
	if join {
		flag = "1"
	}
	vals, err := r.run(lua.FairAcquire, []string{fLock, fFence, fQueue, fAlive},
		"10000", owner, id, strconv.Itoa(fWait), flag, strconv.Itoa(fBeat), "P"+fChan).AsIntSlice()
	if err != nil {
		r.t.Fatalf("acquire %s: %v", owner, err)
	}
	return vals
}

func (r *fairRig) release(owner string) int64 {
	r.t.Helper()
	r.req++
	req := "r" + strconv.Itoa(r.req)
	n, err := r.run(lua.FairRelease, []string{fLock, fRel + ":" + req, fQueue, fAlive},
		owner, req, "P"+fChan, "10000").AsInt64()
	if err != nil {
		r.t.Fatalf("release %s: %v", owner, err)
	}
	return n
}

func (r *fairRig) leave(owner string) int64 {
	r.t.Helper()
	n, err := r.run(lua.FairLeave, []string{fLock, fQueue, fAlive}, owner, "P"+fChan, strconv.Itoa(fBeat)).AsInt64()
	if err != nil {
		r.t.Fatalf("leave %s: %v", owner, err)
	}
	return n
}

// queue returns the queued owners in order.
func (r *fairRig) queue() []string {
	r.t.Helper()
	arr, _ := r.do("ZRANGE", fQueue, "0", "-1").AsStrSlice()
	return arr
}

// expect checks the next message published (want "" : none within a short while).
func (r *fairRig) expect(want string) {
	r.t.Helper()
	wait := 2 * time.Second
	if want == "" {
		wait = 100 * time.Millisecond
	}
	select {
	case got := <-r.msgs:
		if got != want {
			r.t.Fatalf("published %q, want %q", got, want)
		}
	case <-time.After(wait):
		if want != "" {
			r.t.Fatalf("nothing published, want %q", want)
		}
	}
}

// eachFairServer is eachServer with a fair-lock rig on each server.
func eachFairServer(t *testing.T, fn func(t *testing.T, r *fairRig)) {
	eachServer(t, func(t *testing.T, tc server) { fn(t, newFairRig(t, tc.c, tc.flags)) })
}

func TestFairScripts_queueOrderAndHandOver(t *testing.T) {
	eachFairServer(t, func(t *testing.T, r *fairRig) {
		eq := func(got []int64, want ...int64) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("reply %v, want %v", got, want)
			}
			for i := range want {
				if want[i] >= 0 && got[i] != want[i] {
					t.Fatalf("reply %v, want %v", got, want)
				}
			}
		}
		// A takes the free lock; nobody queues for that.
		eq(r.acquire("A", true), 1, -1, 1)
		if q := r.queue(); len(q) != 0 {
			t.Fatalf("queue %v after a free grant", q)
		}
		// B and C queue behind; a refresh keeps B's place; a single attempt (D) never queues.
		eq(r.acquire("B", true), 0, fBeat)
		eq(r.acquire("C", true), 0, fBeat)
		before, _ := r.do("ZSCORE", fQueue, "B").ToString()
		eq(r.acquire("B", true), 0, fBeat)
		if after, _ := r.do("ZSCORE", fQueue, "B").ToString(); before == "" || before != after {
			t.Fatalf("a refresh moved B's place: %q -> %q", before, after)
		}
		v := r.acquire("D", false)
		eq(v, 0, -1)
		if v[1] <= 0 || v[1] > 10000 {
			t.Fatalf("a single attempt is told the lease, got %v", v)
		}
		if q := strings.Join(r.queue(), ","); q != "B,C" {
			t.Fatalf("queue %s, want B,C", q)
		}
		// Re-entry by the holder; a replayed request is answered, not applied again.
		eq(r.acquire("A", true, "again"), 1, -1, 2)
		eq(r.acquire("A", true, "again"), 1, -1, 2)
		eq([]int64{r.release("A")}, 1)
		r.expect("")
		// The last release wakes only the head.
		eq([]int64{r.release("A")}, 0)
		r.expect("=B")
		r.expect("")
		// Free, but B heads the queue: neither C (queued) nor D (single attempt) passes it.
		v = r.acquire("C", true)
		eq(v, 0, -1)
		if v[1] > fBeat {
			t.Fatalf("behind a live head on a free lock, wait at most a heartbeat: %v", v)
		}
		eq(r.acquire("D", false), 0, -1)
		// B leaves: the lock is free, so the new head (C) is woken.
		eq([]int64{r.leave("B")}, 1)
		r.expect("=C")
		eq([]int64{r.leave("B")}, 0) // leaving twice is harmless
		r.expect("")
		eq(r.acquire("C", true), 1, -1, 1)
		if q := r.queue(); len(q) != 0 {
			t.Fatalf("queue %v after the head was served", q)
		}
		if n, _ := r.do("ZCARD", fAlive).AsInt64(); n != 0 {
			t.Fatalf("%d life records left after the head was served", n)
		}
		// The last release with nobody queued publishes nothing.
		eq([]int64{r.release("C")}, 0)
		r.expect("")
	})
}

func TestFairScripts_deadPlacesArePurged(t *testing.T) {
	eachFairServer(t, func(t *testing.T, r *fairRig) {
		past := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
		future := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
		// A dead head (life over), and a head without a life record, ahead of E.
		r.do("ZADD", fQueue, "1", "dead", "2", "nolife", "3", "E")
		r.do("ZADD", fAlive, past, "dead", future, "E")
		eq := func(got []int64, ok int64) {
			t.Helper()
			if len(got) == 0 || got[0] != ok {
				t.Fatalf("reply %v, want ok=%d", got, ok)
			}
		}
		eq(r.acquire("E", true), 1)
		if q := r.queue(); len(q) != 0 {
			t.Fatalf("queue %v: dead places were not purged", q)
		}
		// A release purges a dead head and wakes the live one behind it.
		r.do("ZADD", fQueue, "1", "dead", "3", "F")
		r.do("ZADD", fAlive, past, "dead", future, "F")
		if n := r.release("E"); n != 0 {
			t.Fatalf("release: %d", n)
		}
		r.expect("=F")
		if q := strings.Join(r.queue(), ","); q != "F" {
			t.Fatalf("queue %s, want F", q)
		}
		// An attempt that purges the dead head of a free lock wakes the new head.
		r.do("ZADD", fQueue, "0", "dead")
		r.do("ZADD", fAlive, past, "dead")
		eq(r.acquire("G", true), 0)
		r.expect("=F")
		if q := strings.Join(r.queue(), ","); q != "F,G" {
			t.Fatalf("queue %s, want F,G", q)
		}
		// The queue keys expire by themselves once every place would have.
		for _, k := range []string{fQueue, fAlive} {
			if ttl, _ := r.do("PTTL", k).AsInt64(); ttl <= 0 || ttl > fWait {
				t.Fatalf("PTTL %s = %d, want (0, %d]", k, ttl, fWait)
			}
		}
	})
}

func TestFairScripts_wrongTypeWritesNothing(t *testing.T) {
	eachFairServer(t, func(t *testing.T, r *fairRig) {
		for _, k := range []string{fLock, fQueue, fAlive} {
			r.do("DEL", fLock, fQueue, fAlive)
			r.do("SET", k, "v")
			_, err := r.run(lua.FairAcquire, []string{fLock, fFence, fQueue, fAlive},
				"10000", "A", "r", "10000", "1", "3000", "P"+fChan).AsIntSlice()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("%s a string: acquire gave %v", k, err)
			}
			if n, _ := r.do("EXISTS", fLock, fQueue, fAlive).AsInt64(); n != 1 {
				t.Fatalf("%s a string: the failed acquire wrote %d keys", k, n-1)
			}
			if k != fLock {
				err := r.run(lua.FairLeave, []string{fLock, fQueue, fAlive}, "A", "P"+fChan, "3000").Error()
				if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Fatalf("%s a string: leave gave %v", k, err)
				}
			}
			if s, _ := r.do("GET", k).ToString(); s != "v" {
				t.Fatalf("%s was changed to %q", k, s)
			}
		}
		// A release whose queue key is of another type leaves the lock held.
		r.do("DEL", fLock, fQueue, fAlive)
		r.acquire("A", true)
		r.do("SET", fQueue, "v")
		err := r.run(lua.FairRelease, []string{fLock, fRel + ":rx", fQueue, fAlive}, "A", "rx", "P"+fChan, "10000").Error()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("release gave %v", err)
		}
		if n, _ := r.do("HGET", fLock, "A").AsInt64(); n != 1 {
			t.Fatalf("the failed release changed the lock: holds %d", n)
		}
	})
}
