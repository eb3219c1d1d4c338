package lua_test

import (
	"context"
	"strings"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// TestFastHash_lastMillisecondKeepsAnExpiry: a script that meets a fast form (the string
// '~<owner> <seq>') in the last millisecond of its lease makes it a hash that still expires.
// Within a script Redis reads keys at the script's start time, so the string is still there,
// but PTTL counts from the clock and answers 0 once that moment passed; fastHash gave the
// hash an expiry only for a PTTL above 0, and the lock was left held by the fast grant's
// owner with no expiry at all: for good (TestSpinMultiHunt_leases, seed 1796463038517910836
// trial 20, a run at df6cbdf: a handle's fast grant with a 74 ms lease, another owner's
// release at its end, and HoldCount 1 and every other acquire refused with PTTL -1 from then
// on). The script here runs in one MULTI with the SET that writes the form with a 2 ms
// lease, and the owner's name is long enough (8 MB) that matching the pattern between the
// script's GET and its PTTL outlasts the lease. Real redis-server only (miniredis keeps no
// script clock).
func TestFastHash_lastMillisecondKeepsAnExpiry(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	form := "~h:" + strings.Repeat("a", 8<<20) + " c.1"
	for _, tc := range []struct {
		name string
		s    *lua.Script
		keys []string
		args []string
	}{
		{"acquire of another owner", lua.Acquire, []string{"{f}", "{f}:fence"}, []string{"10000", "h:x", "z.1"}},
		{"release of another owner", lua.Release, []string{"{f}"}, []string{"h:x", "z.1", "P{f}:released", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Do(ctx, c.B().Del().Key("{f}", "{f}:fence", "{f}:f").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			res := c.DoMulti(ctx,
				c.B().Multi().Build(),
				c.B().Set().Key("{f}").Value(form).Nx().PxMilliseconds(2).Build(),
				c.B().Eval().Script(tc.s.Source()).Numkeys(int64(len(tc.keys))).Key(tc.keys...).Arg(tc.args...).Build(),
				c.B().Exec().Build())
			exec, err := res[len(res)-1].ToArray()
			if err != nil {
				t.Fatalf("EXEC: %v", err)
			}
			if err := exec[1].Error(); err != nil {
				t.Fatalf("%s: %v", tc.s.Name(), err)
			}
			pttl, err := c.Do(ctx, c.B().Pttl().Key("{f}").Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if pttl == -1 {
				typ, _ := c.Do(ctx, c.B().Type().Key("{f}").Build()).ToString()
				t.Fatalf("the fast form, met by %s at its lease's end, was left a %s with no expiry", tc.s.Name(), typ)
			}
			if pttl > 2 {
				t.Fatalf("the fast form's lease grew to %d ms", pttl)
			}
		})
	}
}
