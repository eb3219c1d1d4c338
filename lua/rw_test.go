package lua_test

import (
	"context"
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
