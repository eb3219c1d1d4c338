package lua_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

var semScripts = []*lua.Script{
	lua.SemSet, lua.SemAcquire, lua.SemRelease, lua.SemDrain, lua.SemDelete,
	lua.PsemSet, lua.PsemAdd, lua.PsemAcquire, lua.PsemRelease, lua.PsemExtend, lua.PsemState, lua.PsemDelete,
}

// TestSemScripts_compile runs each script against a real server (with its flags) and
// miniredis (without), on keys that exist nowhere: every form must compile and answer.
func TestSemScripts_compile(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		sem := []string{"{s}", "{s}:log", "{s}:logx"}
		runs := map[*lua.Script][2][]string{
			lua.SemSet:      {sem, {"2", "r1", "10000", "P{s}:released", "0"}},
			lua.SemAcquire:  {sem, {"1", "r2", "10000"}},
			lua.SemRelease:  {sem, {"1", "r3", "10000", "P{s}:released", "0"}},
			lua.SemDrain:    {sem, {"r4", "10000"}},
			lua.SemDelete:   {{"{s}"}, nil},
			lua.PsemSet:     {{"{p}", "{p}:log", "{p}:logx"}, {"1", "r5", "10000", "P{p}:released"}},
			lua.PsemAdd:     {{"{p}", "{p}:log", "{p}:logx"}, {"1", "r6", "10000", "P{p}:released"}},
			lua.PsemAcquire: {{"{p}", "{p}:leases"}, {"id1", "1000"}},
			lua.PsemExtend:  {{"{p}", "{p}:leases", "{p}:log", "{p}:logx"}, {"id1", "2000", "P{p}:released", "c.8", "10000"}},
			lua.PsemState:   {{"{p}", "{p}:leases"}, {"id1"}},
			lua.PsemRelease: {{"{p}", "{p}:leases", "{p}:log", "{p}:logx"}, {"id1", "r7", "10000", "P{p}:released"}},
			lua.PsemDelete:  {{"{p}", "{p}:leases"}, nil},
		}
		for _, s := range semScripts {
			r := runs[s]
			if err := s.Lua(tc.flags).Exec(ctx, tc.c, r[0], r[1]).Error(); err != nil {
				t.Errorf("%s: %v", s.Name(), err)
			}
		}
	})
}

// TestSemScripts_requestLog checks the request log that makes the scripts safe to resend: a
// resent request is answered without being applied again, and records are forgotten once
// their time is up, whatever the traffic.
func TestSemScripts_requestLog(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	keys := []string{"{q}", "{q}:log", "{q}:logx"}
	release := func(req, keep string) int64 {
		t.Helper()
		n, err := lua.SemRelease.Lua(true).Exec(ctx, c, keys, []string{"1", req, keep, "P{q}:released", "0"}).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("release %s: %v %v", req, n, err)
		}
		return n
	}
	count := func() string {
		v, _ := c.Do(ctx, c.B().Get().Key("{q}").Build()).ToString()
		return v
	}
	logged := func(req string) bool {
		ok, _ := c.Do(ctx, c.B().Hexists().Key("{q}:log").Field(req).Build()).AsBool()
		return ok
	}
	release("short", "20")
	release("long", "10000")
	release("long", "10000") // a resend
	if got := count(); got != "2" {
		t.Fatalf("count %s after two requests and a resend, want 2", got)
	}
	time.Sleep(50 * time.Millisecond)
	release("later", "10000") // prunes the records whose time is up
	if logged("short") {
		t.Error("a record past its time was kept")
	}
	if !logged("long") || !logged("later") {
		t.Error("a record within its time was dropped")
	}
	ttl, _ := c.Do(ctx, c.B().Pttl().Key("{q}:logx").Build()).AsInt64()
	if ttl <= 0 || ttl > 10000 {
		t.Errorf("the log must expire with its last record, PTTL %d", ttl)
	}
}

// TestPsemExtend_lateSendsOrdered: psem_extend sets the lease of the Client's newest Extend
// of a permit; a send that is not the newest (a resend of the request applied last, or an
// earlier request of the same Client: '<client>.<counter>') only lengthens the lease, never
// shortens it. Another Client's request is newest whatever its counter.
func TestPsemExtend_lateSendsOrdered(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	keys := []string{"{e}", "{e}:leases", "{e}:log", "{e}:logx"}
	if err := c.Do(ctx, c.B().Hset().Key("{e}").FieldValue().FieldValue("permits", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n, err := lua.PsemAcquire.Lua(true).Exec(ctx, c, keys[:2], []string{"id1", "60000"}).AsIntSlice(); err != nil || len(n) != 1 || n[0] != 1 {
		t.Fatalf("acquire: %v %v", n, err)
	}
	extend := func(req string, lease int) {
		t.Helper()
		n, err := lua.PsemExtend.Lua(true).Exec(ctx, c, keys, []string{"id1", strconv.Itoa(lease), "P{e}:released", req, "10000"}).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("extend %s %dms: %v %v", req, lease, n, err)
		}
	}
	left := func() int64 {
		t.Helper()
		vals, err := lua.PsemState.Lua(true).Exec(ctx, c, keys[:2], []string{"id1"}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		return vals[3]
	}
	steps := []struct {
		req      string
		lease    int
		min, max int64 // the lease left after it, ms
		what     string
	}{
		{"a.9", 60000, 59000, 60000, "the newest request sets its lease"},
		{"a.7", 100, 59000, 60000, "an earlier request of the same Client does not shorten it"},
		{"a.9", 100, 59000, 60000, "nor a resend of the request applied last"},
		{"a.7", 120000, 119000, 120000, "an earlier request lengthens it"},
		{"a.10", 30000, 29000, 30000, "a newer request of the same Client shortens it"},
		{"a.9", 200, 29000, 30000, "and stays in force"},
		{"b.1", 20000, 19000, 20000, "another Client's request is not ordered against the first's"},
		{"a.11", 40000, 39000, 40000, "the first Client's next request is newest again"},
	}
	for _, st := range steps {
		extend(st.req, st.lease)
		if got := left(); got < st.min || got > st.max {
			t.Fatalf("after %s %dms the lease has %dms left, want %d-%d: %s", st.req, st.lease, got, st.min, st.max, st.what)
		}
	}
}

// TestSemDrain_exactBeyond2p53: a count at 2^53 and beyond (up to 2^63-1) is drained
// exactly, and its answer, for the send and for a resend of the same request, is its exact
// count (a bulk reply of its digits there, an integer below); a Lua number is not exact there,
// and DECRBY by one left permits behind. Its time to live stays. sem_release gives such a count
// back as exactly.
func TestSemDrain_exactBeyond2p53(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		keys := []string{"{d}", "{d}:log", "{d}:logx"}
		for i, count := range []string{"9007199254740991", "9007199254740992", "10133099161583617", "9223372036854775807"} {
			tc.c.Do(ctx, tc.c.B().Set().Key("{d}").Value(count).Px(time.Minute).Build())
			req := "r" + strconv.Itoa(i)
			for _, send := range []string{req, "+" + req} {
				res := lua.SemDrain.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{send, "10000"})
				n, err := res.AsInt64()
				if err != nil || strconv.FormatInt(n, 10) != count {
					t.Fatalf("drain %s (send %s): %d %v", count, send, n, err)
				}
			}
			if v, _ := tc.c.Do(ctx, tc.c.B().Get().Key("{d}").Build()).ToString(); v != "0" {
				t.Fatalf("left %s after draining %s", v, count)
			}
			if ms, _ := tc.c.Do(ctx, tc.c.B().Pttl().Key("{d}").Build()).AsInt64(); ms <= 0 {
				t.Fatalf("time to live %d after the drain", ms)
			}
			// What a drain whose caller left gives back (Semaphore.DrainPermits): as exact.
			if err := lua.SemRelease.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{count, "g" + req, "10000", "P{d}:released", "0"}).Error(); err != nil {
				t.Fatal(err)
			}
			if v, _ := tc.c.Do(ctx, tc.c.B().Get().Key("{d}").Build()).ToString(); v != count {
				t.Fatalf("%s after releasing %s to 0", v, count)
			}
		}
	})
}
