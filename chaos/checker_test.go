package chaos

import (
	"testing"

	"github.com/relock-go/relock/chaos/internal/worker"
)

// The checkers must catch what they claim to catch: these histories are made by hand.

func acq(owner string, call, ret int64, out string, tok int64) worker.Op {
	return worker.Op{Kind: "acquire", Name: "n", Owner: owner, Call: call, Return: ret, Out: out, Token: tok}
}

func rel(owner string, call, ret int64, out string, tok int64) worker.Op {
	return worker.Op{Kind: "release", Name: "n", Owner: owner, Call: call, Return: ret, Out: out, Token: tok}
}

func TestModel(t *testing.T) {
	cases := []struct {
		name   string
		expiry bool
		ops    []worker.Op
		want   bool
	}{
		{"sequential", false, []worker.Op{
			acq("a", 0, 1, "ok", 1), rel("a", 2, 3, "ok", 1), acq("b", 4, 5, "ok", 2), rel("b", 6, 7, "ok", 2),
		}, true},
		{"contended fail while held", false, []worker.Op{
			acq("a", 0, 1, "ok", 1), acq("b", 2, 3, "fail", 0), rel("a", 4, 5, "ok", 1),
		}, true},
		{"fail while free", false, []worker.Op{
			acq("b", 2, 3, "fail", 0),
		}, false},
		{"two holders", false, []worker.Op{
			acq("a", 0, 1, "ok", 1), acq("b", 2, 3, "ok", 2), rel("a", 4, 5, "ok", 1), rel("b", 6, 7, "ok", 2),
		}, false},
		{"two holders, first released ok, even with expiry", true, []worker.Op{
			acq("a", 0, 1, "ok", 1), acq("b", 2, 3, "ok", 2), rel("a", 4, 5, "ok", 1), rel("b", 6, 7, "ok", 2),
		}, false},
		{"expired holder told notheld", true, []worker.Op{
			acq("a", 0, 1, "ok", 1), acq("b", 2, 3, "ok", 2), rel("a", 4, 5, "notheld", 1), rel("b", 6, 7, "ok", 2),
		}, true},
		{"token goes backwards", true, []worker.Op{
			acq("a", 0, 1, "ok", 5), rel("a", 2, 3, "ok", 5), acq("b", 4, 5, "ok", 3), rel("b", 6, 7, "ok", 3),
		}, false},
		{"concurrent acquires may linearize either way", false, []worker.Op{
			acq("a", 0, 10, "ok", 2), acq("b", 1, 3, "ok", 1), rel("b", 4, 5, "ok", 1), rel("a", 11, 12, "ok", 2),
		}, true},
		{"unknown acquire leaves a ghost that expires", false, []worker.Op{
			acq("a", 0, 1, "unknown", 0), acq("b", 5, 6, "fail", 0), acq("b", 7, 8, "ok", 2), rel("b", 9, 10, "ok", 2),
		}, true},
		{"unknown acquire of a non-holder cannot free the lock", false, []worker.Op{
			acq("b", 0, 1, "ok", 1), acq("a", 2, 3, "unknown", 0), acq("c", 4, 5, "ok", 2),
		}, false},
		{"noop has no effect", false, []worker.Op{
			acq("a", 0, 1, "noop", 0), acq("b", 2, 3, "fail", 0),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := linearizable(c.ops, c.expiry) == "Ok"
			if got != c.want {
				t.Fatalf("linearizable = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Run("clean", func(t *testing.T) {
		res := newResource()
		v, _ := res.Read("n", "a", 1)
		res.Write("n", "a", 1, v+1)
		v, _ = res.Read("n", "b", 2)
		res.Write("n", "b", 2, v+1)
		rep := check(res, []worker.Op{acq("a", 0, 1, "ok", 1), rel("a", 2, 3, "ok", 1), acq("b", 4, 5, "ok", 2), rel("b", 6, 7, "ok", 2)}, nil)
		if rep.violations() != 0 || rep.Sections != 2 {
			t.Fatal(rep)
		}
	})
	t.Run("stale write refused, counter exact", func(t *testing.T) {
		res := newResource()
		va, _ := res.Read("n", "a", 1) // a reads, pauses
		vb, _ := res.Read("n", "b", 2) // b took over
		res.Write("n", "b", 2, vb+1)
		if res.Write("n", "a", 1, va+1) {
			t.Fatal("stale write accepted")
		}
		rep := check(res, nil, nil)
		if rep.violations() != 0 || rep.Rejected != 1 || rep.Sections != 1 {
			t.Fatal(rep)
		}
	})
	t.Run("overlap and lost update without fencing", func(t *testing.T) {
		res := newResource()
		va, _ := res.Read("n", "a", 1)
		vb, _ := res.Read("n", "b", 1) // same token: an overlap the fence cannot see
		res.Write("n", "b", 1, vb+1)
		res.Write("n", "a", 1, va+1)
		rep := check(res, nil, nil)
		if rep.Overlaps == 0 || rep.CounterOff == 0 || rep.TokensBack == 0 {
			t.Fatal(rep)
		}
	})
	t.Run("hold overlap without a loss notice", func(t *testing.T) {
		ops := []worker.Op{acq("a", 0, 1, "ok", 1), acq("b", 2, 3, "ok", 2), rel("a", 4, 5, "notheld", 1), rel("b", 6, 7, "ok", 2)}
		if rep := check(newResource(), ops, nil); rep.HoldOverlaps != 1 {
			t.Fatal(rep)
		}
		told := []worker.Lost{{Name: "n", Owner: "a", Token: 1, At: 4}}
		if rep := check(newResource(), ops, told); rep.HoldOverlaps != 0 || rep.ToldOverlaps != 1 {
			t.Fatal(rep)
		}
	})
}
