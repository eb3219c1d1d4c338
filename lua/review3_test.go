package lua_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/relock-go/relock/lua"
)

// TestScripts_spentFirstSendUnderAnotherClientsTenure: a context owner ('u:') shared by two
// Clients. Client A's acquire goes unanswered and A replays it ('+' .. number): the lock is
// another owner's, so the replay is refused and spends the number (lib_spent.lua). The
// other owner lets go, and Client B takes the lock afresh for the same context owner. Then
// A's first send, which lingered in the network, reaches Redis: it must grant nothing (the
// number is spent). The fair and read-write locks check the spent numbers on a re-entry;
// the plain lock's acquire.lua relies on the order of the owner's numbers there ("the order
// of sequence numbers refuses the first send while the owner holds the lock"), and A's
// number is the only one of A's in the owner's field, which B's fresh grant wrote: the
// first send re-enters, a hold no call of A took (Redis counts it A's, lib_seq.lua), renewed
// while B holds and left for a whole lease after B's last Unlock.
func TestScripts_spentFirstSendUnderAnotherClientsTenure(t *testing.T) {
	for _, k := range seqKinds() {
		if k.name == "rw/r" {
			continue // readers share: the other owner's read hold refuses nobody
		}
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				seqDo(t, tc)
				const a, b, z = "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60.", "1c8d9c1e7f1a4a559a3e1d2c3b4a5f61.", "2d8d9c1e7f1a4a559a3e1d2c3b4a5f62."
				const owner = "u:shared"
				if v, err := k.acq(ctx, tc, "h:z", z+"1"); err != nil || v[0] != 1 {
					t.Fatalf("the other owner's acquire: %v %v", v, err)
				}
				if v, err := k.acq(ctx, tc, owner, "+"+a+"5"); err != nil || v[0] != 0 {
					t.Fatalf("A's replay, the lock held by another owner: %v %v, want a refusal", v, err)
				}
				if n, err := k.rel(ctx, tc, "h:z", z+"2"); err != nil || n != 0 {
					t.Fatalf("the other owner's release: %d %v", n, err)
				}
				if v, err := k.acq(ctx, tc, owner, b+"1"); err != nil || v[0] != 1 {
					t.Fatalf("B's acquire for the owner: %v %v", v, err)
				}
				if v, err := k.acq(ctx, tc, owner, a+"5"); err != nil || v[0] != 0 {
					t.Fatalf("A's first send after its replay spent its number: %v %v, want {0, 0} (nothing granted)", v, err)
				}
			})
		})
	}
}

// TestRelease_replayIntoALaterTenureGivesNothingBack: a context owner shared by Clients A and
// B. A's release of its last hold is applied (the lock is freed) but unanswered; B takes the
// lock afresh for the owner and re-enters. A's replay of the release (naming the tenure it
// gave back in) then reaches B's tenure: A has no entry in the owner's field, which B's fresh
// grant wrote, so no number orders it. It must give nothing back (-2: the tenure it names is
// gone); it took one of B's holds (the drift hunt's shared owner, seed 1796336536295708907
// trial 11: "booked 2, Redis 1"). The same for a handle's owner whose lease ran out and was
// taken afresh by itself (its later numbers refuse the replay already).
func TestRelease_replayIntoALaterTenureGivesNothingBack(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := seqDo(t, tc)
		defer do("DEL", "{r}", "{r}:fence", "{r}:forced")
		const a, b = "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60.", "1c8d9c1e7f1a4a559a3e1d2c3b4a5f61."
		for _, owner := range []string{"u:shared", "h:0b8d9c1e7f1a4a559a3e1d2c3b4a5f60:1"} {
			do("DEL", "{r}", "{r}:fence", "{r}:forced")
			acq := func(seq string) []int64 {
				t.Helper()
				v, err := lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{r}", "{r}:fence"}, []string{"10000", owner, seq, "1"}).AsIntSlice()
				if err != nil || v[0] != 1 {
					t.Fatalf("%s acquire %s: %v %v", owner, seq, v, err)
				}
				return v
			}
			rel := func(keys []string, seq, tenure string) int64 {
				t.Helper()
				n, err := lua.Release.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{owner, seq, "ch", tenure}).AsInt64()
				if err != nil {
					t.Fatalf("%s release %s: %v", owner, seq, err)
				}
				return n
			}
			tok := acq(a + "1")[1]
			if n := rel([]string{"{r}"}, a+"2", ""); n != 0 {
				t.Fatalf("%s: A's release of its last hold: %d, want 0 (freed)", owner, n)
			}
			second := b
			if owner[0] == 'h' {
				second = a // a handle's owner is one Client's: its next grant, later numbers
			}
			acq(second + "3")
			acq(second + "4")
			// -2 (its tenure is gone); a handle's owner's later numbers supersede it first (-3).
			if n := rel([]string{"{r}", "{r}:forced"}, a+"2", fmt.Sprint(tok)); n != -2 && n != -3 {
				t.Fatalf("%s: A's replay into the later tenure: %d, want -2 or -3 (nothing given back)", owner, n)
			}
			if h, _ := do("HGET", "{r}", owner).ToString(); h != "2" {
				t.Fatalf("%s: the later tenure counts %q holds, want 2", owner, h)
			}
		}
	})
}
