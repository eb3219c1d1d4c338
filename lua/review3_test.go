package lua_test

import (
	"context"
	"testing"
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
