package lua_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// TestAcquire_spentRequestIDs: a replay (its request id sent as '+' .. id) spends the id in
// the fence; after that, the id's first send grants nothing, neither on a free lock nor as a
// re-entry, and a replay of it answers only while it is the owner's last request. (The ids
// are sequence numbers, '<client>.<n>': acquire.lua also refuses, by their order, a first
// send arriving after the owner's later request; the other scripts take them as opaque ids.) Records
// run out, are kept by other grants, and a fence keeps at most 32. For every acquire script
// (and both kinds of an RWMutex hold).
func TestAcquire_spentRequestIDs(t *testing.T) {
	type kind struct {
		name  string
		acq   func(ctx context.Context, tc server, owner, req string) ([]int64, error)
		field func(owner string) string // the owner's hold count field
	}
	const lease = "10000"
	kinds := []kind{
		{"acquire", func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
			return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{s}", "{s}:fence"}, []string{lease, owner, req, "1"}).AsIntSlice()
		}, func(o string) string { return o }},
		{"fair_acquire", func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
			return lua.FairAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{s}", "{s}:fence", "{s}:queue", "{s}:alive"},
				[]string{lease, owner, req, "10000", "1", "3000", ""}).AsIntSlice()
		}, func(o string) string { return o }},
		{"rw_acquire/w", func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
			return lua.RWAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{s}", "{s}:fence", "{s}:leases", "{s}:writers"},
				[]string{lease, owner, req, "w", "10000", "1"}).AsIntSlice()
		}, func(o string) string { return o }},
		{"rw_acquire/r", func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
			return lua.RWAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{s}", "{s}:fence", "{s}:leases", "{s}:writers"},
				[]string{lease, owner, req, "r", "10000", "0"}).AsIntSlice()
		}, func(o string) string { return "r:" + o }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := func(args ...string) rueidis.RedisResult {
					t.Helper()
					return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
				}
				free := func() { do("DEL", "{s}", "{s}:queue", "{s}:alive", "{s}:leases", "{s}:writers") }
				defer do("DEL", "{s}", "{s}:fence", "{s}:queue", "{s}:alive", "{s}:leases", "{s}:writers")
				acq := func(owner, req string) []int64 {
					t.Helper()
					v, err := k.acq(ctx, tc, owner, req)
					if err != nil {
						t.Fatalf("acquire %s %s: %v", owner, req, err)
					}
					return v
				}
				holds := func(owner string) string {
					t.Helper()
					s, err := do("HGET", "{s}", k.field(owner)).ToString()
					if rueidis.IsRedisNil(err) {
						return ""
					}
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				fence := func() string {
					t.Helper()
					s, _ := do("GET", "{s}:fence").ToString()
					return s
				}
				free()
				do("DEL", "{s}:fence")

				// A replay takes the free lock and spends its id; a second replay is answered.
				if v := acq("h:a", "+c.1"); v[0] != 1 || v[2] != 1 {
					t.Fatalf("replay c.1 on a free lock: %v", v)
				}
				if f := fence(); !strings.Contains(f, "/c.1/") {
					t.Fatalf("the fence %q does not record c.1 as spent", f)
				}
				if v := acq("h:a", "+c.1"); v[0] != 1 || v[2] != 1 {
					t.Fatalf("replay c.1 again: %v", v)
				}
				// Given back; then the first send arrives: nothing.
				free()
				if v := acq("h:a", "c.1"); v[0] != 0 || v[1] != 0 {
					t.Fatalf("late first send of c.1 on the free lock: %v, want {0, 0}", v)
				}
				if n, _ := do("EXISTS", "{s}").AsInt64(); n != 0 {
					t.Fatal("the late first send wrote the lock")
				}
				if v := acq("h:a", "+c.1"); v[0] != 0 {
					t.Fatalf("a replay of the spent c.1 on the free lock: %v", v)
				}
				// Another request takes the lock; the record stays, and re-entries read it.
				if v := acq("h:a", "c.2"); v[0] != 1 || v[2] != 1 {
					t.Fatalf("c.2: %v", v)
				}
				if f := fence(); !strings.Contains(f, "/c.1/") {
					t.Fatalf("the grant of c.2 dropped the record of c.1: %q", f)
				}
				if v := acq("h:a", "c.1"); v[0] != 0 || holds("h:a") != "1" {
					t.Fatalf("late first send of c.1 as a re-entry: %v, holds %s", v, holds("h:a"))
				}
				// A replayed re-entry is applied once and spent.
				if v := acq("h:a", "+c.3"); v[0] != 1 || v[2] != 2 {
					t.Fatalf("replayed re-entry c.3: %v", v)
				}
				if v := acq("h:a", "c.3"); v[0] != 1 || v[2] != 2 || holds("h:a") != "2" {
					t.Fatalf("first send of c.3 while it is the last request: %v, holds %s", v, holds("h:a"))
				}
				if v := acq("h:a", "c.4"); v[0] != 1 || v[2] != 3 {
					t.Fatalf("re-entry c.4: %v", v)
				}
				if v := acq("h:a", "c.3"); v[0] != 0 || holds("h:a") != "3" {
					t.Fatalf("late first send of r3 after c.4: %v, holds %s", v, holds("h:a"))
				}
				// A replay refused by another holder spends its id too (readers share a read
				// lock: not refused).
				if k.name != "rw_acquire/r" {
					if v := acq("h:b", "+c.5"); v[0] != 0 {
						t.Fatalf("replay c.5 of another owner: %v", v)
					}
					free()
					if v := acq("h:b", "c.5"); v[0] != 0 {
						t.Fatalf("late first send of c.5 on the free lock: %v", v)
					}
					if n, _ := do("EXISTS", "{s}", "{s}:queue", "{s}:writers").AsInt64(); n != 0 {
						t.Fatal("the late first send of c.5 wrote the lock, a place or a claim")
					}
				}
				free()

				// A replay answered from the state (its first send was applied, the reply
				// lost) spends the id too: once that hold has ended (its lease ran out: nobody
				// recorded it), a later replay of the request grants nothing afresh. Before, it
				// took the free lock again, a second hold for a caller that had gone (the model
				// test, RWMutex seed 14194729840834505905: a background replay 22 ms after the
				// first grant's lease ended, its reply lost too).
				if v := acq("h:e", "c.12"); v[0] != 1 {
					t.Fatalf("c.12: %v", v)
				}
				if v := acq("h:e", "+c.12"); v[0] != 1 || v[2] != 1 {
					t.Fatalf("replay of the applied c.12: %v", v)
				}
				if f := fence(); !strings.Contains(f, "/c.12/") {
					t.Fatalf("a replay answered from the state does not record c.12 as spent: %q", f)
				}
				free() // its lease ran out
				if v := acq("h:e", "+c.12"); v[0] != 0 || v[1] != 0 {
					t.Fatalf("a replay of c.12 after its hold ended: %v, want {0, 0}", v)
				}
				if n, _ := do("EXISTS", "{s}").AsInt64(); n != 0 {
					t.Fatal("the replay of c.12 after its hold ended wrote the lock")
				}

				// Records run out: an ended one grants again, and the next grant drops it.
				do("SET", "{s}:fence", "5/c.9/1")
				if v := acq("h:c", "c.9"); v[0] != 1 {
					t.Fatalf("an ended record: %v", v)
				}
				if f := fence(); k.name != "rw_acquire/r" && strings.Contains(f, "/") { // a read grant writes no fence
					t.Fatalf("the ended record was kept: %q", f)
				}
				free()
				// At most 32 records, the newest.
				var b strings.Builder
				b.WriteString("5")
				for i := 0; i < 40; i++ {
					fmt.Fprintf(&b, "/old%d/99999999999999", i)
				}
				do("SET", "{s}:fence", b.String())
				if v := acq("h:c", "+c.10"); v[0] != 1 {
					t.Fatalf("replay c.10: %v", v)
				}
				f := fence()
				if n := strings.Count(f, "/") / 2; n != 32 || !strings.Contains(f, "/c.10/") || strings.Contains(f, "/old8/") {
					t.Fatalf("the fence keeps %d records (want 32, the newest): %q", n, f)
				}
				free()
				// A fence that is not a token and records still fails a fresh write grant.
				if k.name != "rw_acquire/r" {
					do("SET", "{s}:fence", "5/x")
					if _, err := k.acq(ctx, tc, "h:d", "c.11"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Fatalf("a fence that is not a fence value: %v", err)
					}
				}
			})
		})
	}
}

// TestPsemAcquire_spentPermitIDs: a resend of a permit acquire ('+' .. id) that grants spends
// the permit id in the semaphore's hash: once the permit is given back, the id's first send
// grants nothing. A refused resend spends nothing (the caller's next attempt reuses the id),
// unless its caller has gone ('!' .. id).
func TestPsemAcquire_spentPermitIDs(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		defer do("DEL", "{p}", "{p}:leases", "{p}:log", "{p}:logx")
		acq := func(id string) []int64 {
			t.Helper()
			v, err := lua.PsemAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{p}", "{p}:leases"}, []string{id, "10000"}).AsIntSlice()
			if err != nil {
				t.Fatalf("acquire %s: %v", id, err)
			}
			return v
		}
		release := func(id, req string) {
			t.Helper()
			n, err := lua.PsemRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{p}", "{p}:leases", "{p}:log", "{p}:logx"},
				[]string{id, req, "10000", ""}).AsInt64()
			if err != nil || n != 1 {
				t.Fatalf("release %s: %v %v", id, n, err)
			}
		}
		held := func() int64 {
			t.Helper()
			n, _ := do("ZCARD", "{p}:leases").AsInt64()
			return n
		}
		do("HSET", "{p}", "permits", "1")
		if v := acq("+p1"); v[0] != 1 {
			t.Fatalf("resend of p1: %v", v)
		}
		if v := acq("+p1"); v[0] != 1 || held() != 1 {
			t.Fatalf("resend of p1 again: %v, %d held", v, held())
		}
		release("p1", "r1")
		if v := acq("p1"); v[0] != 0 || held() != 0 {
			t.Fatalf("late first send of p1: %v, %d held", v, held())
		}
		// A refused resend spends nothing.
		if v := acq("p2"); v[0] != 1 {
			t.Fatalf("p2: %v", v)
		}
		if v := acq("+p3"); v[0] != 0 {
			t.Fatalf("resend of p3 with no permit free: %v", v)
		}
		release("p2", "r2")
		if v := acq("p3"); v[0] != 1 {
			t.Fatalf("p3 after a refused resend: %v", v)
		}
		release("p3", "r3")
		// A refused resend whose caller has gone ('!') spends the id.
		if v := acq("p4"); v[0] != 1 {
			t.Fatalf("p4: %v", v)
		}
		if v := acq("!p5"); v[0] != 0 {
			t.Fatalf("resend of p5 (caller gone) with no permit free: %v", v)
		}
		release("p4", "r4")
		if v := acq("p5"); v[0] != 0 || held() != 0 {
			t.Fatalf("late first send of p5 after a refused resend whose caller had gone: %v, %d held", v, held())
		}
		// Ended records go with the next grant.
		do("HSET", "{p}", "spent", "/p9/1")
		if v := acq("p9"); v[0] != 1 {
			t.Fatalf("p9 with an ended record: %v", v)
		}
		if n, _ := do("HEXISTS", "{p}", "spent").AsInt64(); n != 0 {
			t.Fatal("the ended records were kept")
		}
	})
}

// TestPsemAcquire_spendOnly: a permit acquire with ARGV[3] '1' (sent by a call that ends
// without a permit after a send of the id whose reply was lost) grants nothing, even with a
// permit free, and spends the id, so that the id's first send, reaching Redis last, grants
// nothing either; when an earlier send granted the permit, it answers {1, left} (the caller
// gives the permit back) and spends the id, so no send of it grants once it is given back.
// A '+' resend that finds its permit live spends the id as well.
func TestPsemAcquire_spendOnly(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		defer do("DEL", "{o}", "{o}:leases", "{o}:log", "{o}:logx")
		acq := func(args ...string) []int64 {
			t.Helper()
			v, err := lua.PsemAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{o}", "{o}:leases"}, append([]string{args[0], "10000"}, args[1:]...)).AsIntSlice()
			if err != nil {
				t.Fatalf("acquire %v: %v", args, err)
			}
			return v
		}
		release := func(id, req string) {
			t.Helper()
			n, err := lua.PsemRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{o}", "{o}:leases", "{o}:log", "{o}:logx"},
				[]string{id, req, "10000", ""}).AsInt64()
			if err != nil || n != 1 {
				t.Fatalf("release %s: %v %v", id, n, err)
			}
		}
		held := func() int64 {
			t.Helper()
			n, _ := do("ZCARD", "{o}:leases").AsInt64()
			return n
		}
		// A semaphore that does not exist keeps no record, and is not made.
		if v := acq("!p0", "1"); len(v) != 2 || v[0] != 0 {
			t.Fatalf("spend of p0 with no semaphore: %v", v)
		}
		if n, _ := do("EXISTS", "{o}").AsInt64(); n != 0 {
			t.Fatal("a spend made the semaphore")
		}
		do("HSET", "{o}", "permits", "1")
		// A permit free: the spend grants nothing, and the late first send nothing either.
		if v := acq("!p1", "1"); len(v) != 2 || v[0] != 0 || held() != 0 {
			t.Fatalf("spend of p1 with a permit free: %v, %d held", v, held())
		}
		if v := acq("p1"); v[0] != 0 || held() != 0 {
			t.Fatalf("late first send of p1 after its spend: %v, %d held", v, held())
		}
		if v := acq("+p1"); v[0] != 0 || held() != 0 {
			t.Fatalf("late resend of p1 after its spend: %v, %d held", v, held())
		}
		// The permit granted by a send that came first: the spend finds it and spends the id.
		if v := acq("p2"); len(v) != 1 || v[0] != 1 {
			t.Fatalf("p2: %v", v)
		}
		if v := acq("!p2", "1"); len(v) != 2 || v[0] != 1 || v[1] <= 0 || v[1] > 10000 {
			t.Fatalf("spend of live p2: %v", v)
		}
		release("p2", "r2")
		for _, late := range []string{"p2", "+p2"} {
			if v := acq(late); v[0] != 0 || held() != 0 {
				t.Fatalf("late send %s after the spend found its permit: %v, %d held", late, v, held())
			}
		}
		// A '+' resend that finds its permit live spends the id.
		if v := acq("p3"); len(v) != 1 || v[0] != 1 {
			t.Fatalf("p3: %v", v)
		}
		if v := acq("+p3"); len(v) != 2 || v[0] != 1 {
			t.Fatalf("resend of live p3: %v", v)
		}
		release("p3", "r3")
		if v := acq("p3"); v[0] != 0 || held() != 0 {
			t.Fatalf("late first send of p3 after a resend found it live: %v, %d held", v, held())
		}
		// Each id is recorded once, however many sends spend it.
		if s, _ := do("HGET", "{o}", "spent").ToString(); strings.Count(s, "/p1/") != 1 || strings.Count(s, "/p2/") != 1 || strings.Count(s, "/p3/") != 1 {
			t.Fatalf("spent records %q", s)
		}
		// A plain send without ARGV[3] still grants.
		if v := acq("p4"); len(v) != 1 || v[0] != 1 {
			t.Fatalf("p4: %v", v)
		}
	})
}

// TestSemAcquire_goneResendRemembersRefusal: a Semaphore acquire's resend ('+' .. id) is the
// request it resends (answered, not applied twice); a resend, whether its caller has gone
// ('!' .. id) or still waits ('+' .. id), remembers a refusal too, so that the request's
// first send, reaching Redis last, takes nothing once permits are back.
func TestSemAcquire_goneResendRemembersRefusal(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		keys := []string{"{q}", "{q}:log", "{q}:logx"}
		defer do("DEL", "{q}", "{q}:log", "{q}:logx")
		acq := func(req string) int64 {
			t.Helper()
			n, err := lua.SemAcquire.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{"1", req, "10000"}).AsInt64()
			if err != nil {
				t.Fatalf("acquire %s: %v", req, err)
			}
			return n
		}
		avail := func() string {
			t.Helper()
			s, _ := do("GET", "{q}").ToString()
			return s
		}
		do("SET", "{q}", "1")
		if acq("r1") != 1 || acq("+r1") != 1 || avail() != "0" {
			t.Fatalf("r1 and its resend: %s available, want 0", avail())
		}
		if acq("!r2") != 0 {
			t.Fatal("a resend whose caller has gone, with no permit free")
		}
		do("SET", "{q}", "1")
		if acq("r2") != 0 || avail() != "1" {
			t.Fatalf("the late first send of r2: %s available, want 1", avail())
		}
		if acq("+r3") != 1 || avail() != "0" {
			t.Fatalf("a resend of r3 takes the permit r2 did not: %s available, want 0", avail())
		}
		// A resend whose caller still waits remembers a refusal as well: the caller tries
		// again under a new id, and the first send must not take permits for nobody.
		if acq("+r4") != 0 {
			t.Fatal("a resend whose caller waits, with no permit free")
		}
		do("SET", "{q}", "1")
		if acq("r4") != 0 || avail() != "1" {
			t.Fatalf("the late first send of r4: %s available, want 1", avail())
		}
	})
}

// TestRelease_handoffToSpentSuccessorFrees: a release that passes the lock to a waiter (a
// successor, under the sequence number the releasing Client gave the hand-off) must not pass
// it when a replay of the waiter's acquire under that number has spent it: the waiter's
// Client resolved the hand-off, whose outcome it did not know, as refused, and nobody would
// take the grant (a release send that lingered in the network past that replay). The lock is
// freed instead ({0, 0}) and the waiter's number grants nothing after. A number not spent is
// passed on as before.
func TestRelease_handoffToSpentSuccessorFrees(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		defer do("DEL", "{h}", "{h}:fence")
		const holder, waiter = "h:aaaa:1", "h:bbbb:1"
		acq := func(owner, seq string) []int64 {
			t.Helper()
			v, err := lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{h}", "{h}:fence"}, []string{"10000", owner, seq, "1"}).AsIntSlice()
			if err != nil {
				t.Fatalf("acquire %s %s: %v", owner, seq, err)
			}
			return v
		}
		rel := func(seq, next string) []int64 {
			t.Helper()
			v, err := lua.Release.Lua(tc.flags).Exec(ctx, tc.c, []string{"{h}", "{h}", "{h}:fence"},
				[]string{holder, seq, "ch", "", waiter, "10000", next}).AsIntSlice()
			if err != nil {
				t.Fatalf("release %s -> %s: %v", seq, next, err)
			}
			return v
		}
		for _, spent := range []bool{true, false} {
			do("DEL", "{h}", "{h}:fence")
			if v := acq(holder, "aaaa.1"); v[0] != 1 {
				t.Fatalf("the holder's acquire: %v", v)
			}
			if spent {
				// The waiter's Client resolves the hand-off: its acquire replayed under the
				// hand-off's number finds the lock held by the holder, refused, and spends it.
				if v := acq(waiter, "+bbbb.5"); v[0] != 0 {
					t.Fatalf("the waiter's replay while the holder holds: %v", v)
				}
			}
			v := rel("aaaa.2", "bbbb.5")
			if spent {
				if v[0] != 0 || v[1] != 0 {
					t.Fatalf("a release passed the lock to a successor whose number was spent: %v (want [0 0]: freed)", v)
				}
				if n, _ := do("EXISTS", "{h}").AsInt64(); n != 0 {
					t.Fatalf("the lock is left held after the release: %v", do("HGETALL", "{h}"))
				}
				if v := acq(waiter, "bbbb.5"); v[0] != 0 {
					t.Fatalf("the spent number granted afterwards: %v", v)
				}
				continue
			}
			if v[0] != 0 || v[1] <= 0 {
				t.Fatalf("a release to a successor whose number is not spent: %v (want passed on)", v)
			}
			if h, _ := do("HGET", "{h}", waiter).ToString(); h != "1" {
				t.Fatalf("the successor holds %q", h)
			}
		}
	})
}

// TestAcquire_refusedReplaysDoNotEvictOthersRecords: a replay refused while another owner
// holds the lock spends its id once. Each refusal of an id already spent wrote another record
// of it, and the fence keeps the newest 32: one owner's replays, refused 32 times while the
// lock was held, pushed out another's live record, whose late first send then took the freed
// lock afresh (the model test, RWMutex seed 4783559955130134365 on branch modellost: a read
// acquire's first send, kept back, answered [1 0 1] after the drain).
func TestAcquire_refusedReplaysDoNotEvictOthersRecords(t *testing.T) {
	const lease = "10000"
	keys := []string{"{s}", "{s}:fence", "{s}:leases", "{s}:writers"}
	kinds := []struct {
		name      string
		hold, acq func(ctx context.Context, tc server, owner, req string) ([]int64, error)
	}{
		{"acquire",
			func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
				return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, keys[:2], []string{lease, owner, req, "1"}).AsIntSlice()
			},
			func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
				return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, keys[:2], []string{lease, owner, req, "1"}).AsIntSlice()
			}},
		{"rw_acquire/r",
			func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
				return lua.RWAcquire.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{lease, owner, req, "w", "10000", "1"}).AsIntSlice()
			},
			func(ctx context.Context, tc server, owner, req string) ([]int64, error) {
				return lua.RWAcquire.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{lease, owner, req, "r", "10000", "0"}).AsIntSlice()
			}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := func(args ...string) rueidis.RedisResult {
					return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
				}
				do("DEL", "{s}", "{s}:fence", "{s}:leases", "{s}:writers")
				defer do("DEL", "{s}", "{s}:fence", "{s}:leases", "{s}:writers")
				if v, err := k.hold(ctx, tc, "h:w", "w.1"); err != nil || v[0] != 1 {
					t.Fatalf("the holder: %v %v", v, err)
				}
				if v, err := k.acq(ctx, tc, "h:a", "+a.7"); err != nil || v[0] != 0 {
					t.Fatalf("a's replay, refused: %v %v", v, err)
				}
				for i := 0; i < 40; i++ {
					if v, err := k.acq(ctx, tc, "h:b", "+b.9"); err != nil || v[0] != 0 {
						t.Fatalf("b's replay %d, refused: %v %v", i, v, err)
					}
				}
				do("DEL", "{s}", "{s}:leases", "{s}:writers") // the holder's lease ends
				v, err := k.acq(ctx, tc, "h:a", "a.7")
				if err != nil || v[0] != 0 {
					f, _ := do("GET", "{s}:fence").ToString()
					t.Fatalf("a's first send, after its spent replay and 40 refusals of b's: %v %v, want {0, 0} (fence %q)", v, err, f)
				}
			})
		})
	}
}
