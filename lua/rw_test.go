package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// TestRWScripts_protocol runs the scripts through one round of the read-write protocol
// against a real server (with flags) and miniredis (without): a reader in, a claiming
// writer refused, a new reader refused by the claim, the reader out, the writer in, an
// upgrade refused, the writer out, the lock gone.
func TestRWScripts_protocol(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		run := func(s *lua.Script, keys []string, args ...string) rueidis.RedisResult {
			t.Helper()
			return s.Lua(tc.flags).Exec(ctx, tc.c, keys, args)
		}
		ints := func(res rueidis.RedisResult) []int64 {
			t.Helper()
			v, err := res.AsIntSlice()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		acq := []string{"{rw}", "{rw}:fence", "{rw}:leases", "{rw}:writers"}
		rel := func(req string) []string { // the release record is the request's own key
			return []string{"{rw}", "{rw}:rel:" + req, "{rw}:leases", "{rw}:writers"}
		}
		state := []string{"{rw}", "{rw}:leases"}
		relArgs := func(owner, req, kind string) []string {
			return []string{owner, req, "", "10000", kind, "P{rw}:released", "P{rw}:released:read"}
		}

		if v := ints(run(lua.RWAcquire, acq, "10000", "a", "1", "r", "3000", "0")); v[0] != 1 || v[2] != 1 {
			t.Fatalf("reader a: %v", v)
		}
		if v := ints(run(lua.RWAcquire, acq, "10000", "b", "2", "w", "3000", "1")); v[0] != 0 || v[1] < 1 || v[1] > 1000 {
			t.Fatalf("claiming writer b: want {0, 1..1000}, got %v", v)
		}
		if v := ints(run(lua.RWAcquire, acq, "10000", "c", "3", "r", "3000", "0")); v[0] != 0 {
			t.Fatalf("new reader c while b claims: %v", v)
		}
		if v := ints(run(lua.RWState, state, "a")); v[0] != 0 || v[1] != 1 || v[3] != 1 {
			t.Fatalf("state: %v", v)
		}
		if v := ints(run(lua.RWRenewRead, state, "10000", "a")); v[0] != 1 {
			t.Fatalf("renew reader a: %v", v)
		}
		if n, err := run(lua.RWRelease, rel("4"), relArgs("a", "4", "r")...).AsInt64(); err != nil || n != 0 {
			t.Fatalf("release reader a: %v %v", n, err)
		}
		if n, err := run(lua.RWRelease, rel("4"), relArgs("a", "4", "r")...).AsInt64(); err != nil || n != 0 {
			t.Fatalf("replayed release of reader a: %v %v", n, err)
		}
		v := ints(run(lua.RWAcquire, acq, "10000", "b", "5", "w", "3000", "1"))
		if v[0] != 1 || v[1] <= 0 || v[2] != 1 {
			t.Fatalf("writer b: %v", v)
		}
		if v := ints(run(lua.RWRenewWrite, state, "10000", "b")); v[0] != 1 {
			t.Fatalf("renew writer b: %v", v)
		}
		if v := ints(run(lua.RWRenewWrite, state, "10000", "a")); v[0] != 0 {
			t.Fatalf("renew of a non-writer: %v", v)
		}
		if v := ints(run(lua.RWAcquire, acq, "10000", "b", "6", "r", "3000", "0")); v[0] != 1 {
			t.Fatalf("the writer takes a read hold: %v", v)
		}
		if n, err := run(lua.RWRelease, rel("7"), relArgs("b", "7", "w")...).AsInt64(); err != nil || n != 0 {
			t.Fatalf("release writer b: %v %v", n, err)
		}
		err := run(lua.RWAcquire, acq, "10000", "b", "8", "w", "3000", "1").Error()
		if err == nil || !strings.HasPrefix(err.Error(), "UPGRADE") {
			t.Fatalf("upgrade: want an UPGRADE error, got %v", err)
		}
		if n, err := run(lua.RWLeave, []string{"{rw}:writers"}, "b", "P{rw}:released:read").AsInt64(); err != nil || n != 0 {
			t.Fatalf("leave without a claim: %v %v", n, err)
		}
		if n, err := run(lua.RWForce, state, "P{rw}:released", "P{rw}:released:read").AsInt64(); err != nil || n != 1 {
			t.Fatalf("force: %v %v", n, err)
		}
		if v := ints(run(lua.RWState, state, "b")); v[0] != 0 || v[1] != 0 || v[3] != 0 {
			t.Fatalf("state after force: %v", v)
		}
		if n, err := run(lua.RWRelease, rel("9"), relArgs("b", "9", "r")...).AsInt64(); err != nil || n != -1 {
			t.Fatalf("release after force: %v %v", n, err)
		}
	})
}

// TestRWRelease_wrongTypeWriters: a writers key of another type (a key of another
// application's, or of another primitive's, under the same name) makes every release refuse
// with a WRONGTYPE error and change nothing, whatever hold it gives back (the last read hold,
// one of several, the write hold, the write hold of an owner that also reads) and whether it
// tells the readers or not: every state, kind, channel and wrong type in turn.
func TestRWRelease_wrongTypeWriters(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		run := func(s *lua.Script, keys []string, args ...string) rueidis.RedisResult {
			t.Helper()
			return s.Lua(tc.flags).Exec(ctx, tc.c, keys, args)
		}
		do := func(args ...string) {
			t.Helper()
			if err := tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build()).Error(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
		const lock, fence, leases, writers, record = "{rw}", "{rw}:fence", "{rw}:leases", "{rw}:writers", "{rw}:rel:r"
		keys := []string{lock, record, leases, writers} // rw_release.lua's KEYS
		// snapshot is the state of keys: each one's type, value and whether it expires.
		snapshot := func() string {
			t.Helper()
			var b strings.Builder
			for _, k := range keys {
				typ, err := tc.c.Do(ctx, tc.c.B().Type().Key(k).Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				var cmd []string
				switch typ {
				case "hash":
					cmd = []string{"HGETALL", k}
				case "zset":
					cmd = []string{"ZRANGE", k, "0", "-1", "WITHSCORES"}
				case "string":
					cmd = []string{"GET", k}
				case "list":
					cmd = []string{"LRANGE", k, "0", "-1"}
				case "set":
					cmd = []string{"SMEMBERS", k}
				}
				var val any
				if cmd != nil {
					v, err := tc.c.Do(ctx, tc.c.B().Arbitrary(cmd...).Build()).ToAny()
					if err != nil {
						t.Fatal(err)
					}
					if m, ok := v.(map[string]any); ok { // HGETALL in RESP3: print it sorted
						val = fmt.Sprint(m)
					} else {
						val = v
					}
				}
				pttl, err := tc.c.Do(ctx, tc.c.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "%s: %s %v expires=%v\n", k, typ, val, pttl > 0)
			}
			return b.String()
		}
		acquire := func(owner, req, kind string) {
			t.Helper()
			v, err := run(lua.RWAcquire, []string{lock, fence, leases, writers}, "60000", owner, req, kind, "3000", "0").AsIntSlice()
			if err != nil || v[0] != 1 {
				t.Fatalf("acquire %s %s: %v %v", owner, kind, v, err)
			}
		}
		wrongs := map[string][]string{
			"string": {"SET", writers, "x"},
			"list":   {"RPUSH", writers, "x"},
			"hash":   {"HSET", writers, "x", "1"},
			"set":    {"SADD", writers, "x"},
		}
		for _, st := range []struct {
			name  string
			take  [][2]string // owner, kind
			owner string      // the releasing owner
			kinds string      // the kinds it may give back
		}{
			{"one read hold", [][2]string{{"a", "r"}}, "a", "r"},
			{"two read holds", [][2]string{{"a", "r"}, {"a", "r"}}, "a", "r"},
			{"two readers", [][2]string{{"a", "r"}, {"c", "r"}}, "a", "r"},
			{"write hold", [][2]string{{"b", "w"}}, "b", "w"},
			{"write and read holds", [][2]string{{"b", "w"}, {"b", "r"}}, "b", "wr"},
		} {
			for _, kind := range strings.Split(st.kinds, "") {
				for _, rchan := range []string{"P{rw}:released:read", ""} {
					for wrong, cmd := range wrongs {
						what := fmt.Sprintf("%s, release %s, readers' channel %q, writers a %s", st.name, kind, rchan, wrong)
						do("DEL", lock, fence, leases, writers, record)
						for i, h := range st.take {
							acquire(h[0], fmt.Sprint("t", i), h[1])
						}
						do(cmd...)
						before := snapshot()
						err := run(lua.RWRelease, keys, st.owner, "r", "", "10000", kind, "P{rw}:released", rchan).Error()
						if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
							t.Errorf("%s: want a WRONGTYPE error, got %v", what, err)
						}
						if after := snapshot(); after != before {
							t.Errorf("%s: the release changed the keys:\nbefore:\n%safter:\n%s", what, before, after)
						}
					}
				}
			}
		}
	})
}

// The read-write renewals report a lock whose key, or whose leases key, holds another type as
// not held (0), and go on with the rest of the batch; they no longer TYPE-check the keys, so
// the wrong type is met by the reads themselves (session 28).
func TestRWRenew_otherTypesReadAsNotHeld(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		run := func(s *lua.Script, keys []string, args ...string) ([]int64, error) {
			t.Helper()
			return s.Lua(tc.flags).Exec(ctx, tc.c, keys, args).AsIntSlice()
		}
		acq := []string{"{rwt}", "{rwt}:fence", "{rwt}:leases", "{rwt}:writers"}
		if err := tc.c.Do(ctx, tc.c.B().Set().Key("{rwt}:s1").Value("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := tc.c.Do(ctx, tc.c.B().Set().Key("{rwt}:s2").Value("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			s     *lua.Script
			kind  string
			owner string
		}{{lua.RWRenewRead, "r", "a"}, {lua.RWRenewWrite, "w", "b"}} {
			if tt.kind == "w" {
				n, err := lua.RWRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{rwt}", "{rwt}:rel:9", "{rwt}:leases", "{rwt}:writers"},
					[]string{"a", "9", "", "10000", "r", "P{rwt}:released", "P{rwt}:released:read"}).AsInt64()
				if err != nil || n != 0 {
					t.Fatalf("release reader a: %v %v", n, err)
				}
			}
			if v, err := run(lua.RWAcquire, acq, "10000", tt.owner, "1"+tt.kind, tt.kind, "3000", "1"); err != nil || v[0] != 1 {
				t.Fatalf("%s hold of %s: %v %v", tt.kind, tt.owner, v, err)
			}
			// lock 1: the lock's key a string; lock 2: its leases key a string; lock 3: held.
			keys := []string{"{rwt}:s1", "{rwt}:leases", "{rwt}", "{rwt}:s2", "{rwt}", "{rwt}:leases"}
			v, err := run(tt.s, keys, "10000", tt.owner, tt.owner, tt.owner)
			if err != nil || fmt.Sprint(v) != "[0 0 1]" {
				t.Fatalf("%s renewal: want [0 0 1], got %v %v", tt.kind, v, err)
			}
		}
	})
}
