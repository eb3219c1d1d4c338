package lua_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// seqKind is one reentrant lock's acquire and release, as the sequence tests send them, and
// the hash field that counts an owner's holds.
type seqKind struct {
	name  string
	acq   func(ctx context.Context, tc server, owner, seq string) ([]int64, error)
	rel   func(ctx context.Context, tc server, owner, seq string) (int64, error)
	field func(owner string) string
}

// seqKinds are the plain, fair and read-write locks (both sides), on the keys {q}...
func seqKinds() []seqKind {
	const lease = "10000"
	relRW := func(side string) func(ctx context.Context, tc server, owner, seq string) (int64, error) {
		return func(ctx context.Context, tc server, owner, seq string) (int64, error) {
			return lua.RWRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:rel:" + seq, "{q}:leases", "{q}:writers"},
				[]string{owner, seq, "", "10000", side, "", ""}).AsInt64()
		}
	}
	acqRW := func(side, mark string) func(ctx context.Context, tc server, owner, seq string) ([]int64, error) {
		return func(ctx context.Context, tc server, owner, seq string) ([]int64, error) {
			return lua.RWAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:fence", "{q}:leases", "{q}:writers"},
				[]string{lease, owner, seq, side, "10000", mark}).AsIntSlice()
		}
	}
	return []seqKind{
		{"plain", func(ctx context.Context, tc server, owner, seq string) ([]int64, error) {
			return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:fence"}, []string{lease, owner, seq}).AsIntSlice()
		}, func(ctx context.Context, tc server, owner, seq string) (int64, error) {
			return lua.Release.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:forced"}, []string{owner, seq, "", ""}).AsInt64()
		}, func(o string) string { return o }},
		{"fair", func(ctx context.Context, tc server, owner, seq string) ([]int64, error) {
			return lua.FairAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:fence", "{q}:queue", "{q}:alive"},
				[]string{lease, owner, seq, "10000", "0", "3000", ""}).AsIntSlice()
		}, func(ctx context.Context, tc server, owner, seq string) (int64, error) {
			return lua.FairRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:rel:" + seq, "{q}:queue", "{q}:alive"},
				[]string{owner, seq, "", "10000"}).AsInt64()
		}, func(o string) string { return o }},
		{"rw/w", acqRW("w", "1"), relRW("w"), func(o string) string { return o }},
		{"rw/r", acqRW("r", "0"), relRW("r"), func(o string) string { return "r:" + o }},
	}
}

// seqDo returns a function that sends a command to tc's server, and deletes the keys the
// sequence tests write ({q}...) when t ends.
func seqDo(t *testing.T, tc server) func(args ...string) rueidis.RedisResult {
	do := func(args ...string) rueidis.RedisResult {
		return tc.c.Do(context.Background(), tc.c.B().Arbitrary(args...).Build())
	}
	t.Cleanup(func() { do("DEL", "{q}", "{q}:fence", "{q}:queue", "{q}:alive", "{q}:leases", "{q}:writers") })
	return do
}

// TestScripts_supersededSequence: every reentrant lock's acquire and release orders an owner's
// operations by their sequence numbers (lib_seq.lua): a send that lingered past the owner's
// later operation (a lower number of the same Client) applies nothing, neither as a re-entry
// nor as a give-back; the same number again is answered from the state; another Client's
// numbers are not compared (its operations apply). For the plain, fair and read-write locks
// (both sides).
func TestScripts_supersededSequence(t *testing.T) {
	kinds := seqKinds()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := seqDo(t, tc)
				holds := func() string {
					t.Helper()
					s, err := do("HGET", "{q}", k.field("h:a")).ToString()
					if rueidis.IsRedisNil(err) {
						return ""
					}
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				acq := func(seq string) []int64 {
					t.Helper()
					v, err := k.acq(ctx, tc, "h:a", seq)
					if err != nil {
						t.Fatalf("acquire %s: %v", seq, err)
					}
					return v
				}
				rel := func(seq string) int64 {
					t.Helper()
					n, err := k.rel(ctx, tc, "h:a", seq)
					if err != nil {
						t.Fatalf("release %s: %v", seq, err)
					}
					return n
				}
				const c = "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60."
				if v := acq(c + "9"); v[0] != 1 || v[2] != 1 {
					t.Fatalf("grant 9: %v", v)
				}
				if v := acq(c + "10"); v[0] != 1 || v[2] != 2 {
					t.Fatalf("re-entry 10: %v", v)
				}
				if v := acq(c + "10"); v[0] != 1 || v[2] != 2 {
					t.Fatalf("10 again is answered from the state: %v", v)
				}
				// 9 and 8 linger past 10: nothing applies.
				if v := acq(c + "9"); v[0] != 0 || holds() != "2" {
					t.Fatalf("re-entry 9 after 10: %v, holds %s", v, holds())
				}
				if n := rel(c + "8"); n != -3 || holds() != "2" {
					t.Fatalf("give-back 8 after 10: %d, holds %s", n, holds())
				}
				if n := rel(c + "11"); n != 1 {
					t.Fatalf("give-back 11: %d", n)
				}
				if v := acq(c + "10"); v[0] != 0 || holds() != "1" {
					t.Fatalf("re-entry 10 after 11: %v, holds %s", v, holds())
				}
				// Another Client's number is not compared: it applies.
				if v := acq("1c8d9c1e7f1a4a559a3e1d2c3b4a5f61.1"); v[0] != 1 || v[2] != 2 {
					t.Fatalf("another Client's re-entry: %v", v)
				}
				if n := rel(c + "12"); n != 1 {
					t.Fatalf("give-back 12: %d", n)
				}
				if n := rel(c + "13"); n != 0 {
					t.Fatalf("the last give-back 13: %d", n)
				}
			})
		})
	}
}

// TestReleaseOrphans_neverTheOwnersOwn: release_orphans gives back at most the holds Redis
// counts beyond the owner's own (keep), however many orphans the caller believes in: an
// orphan whose give-back was applied after all is not given back twice. It orders by
// sequence number like the other scripts, and writes nothing for an owner that holds none.
func TestReleaseOrphans_neverTheOwnersOwn(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		defer do("DEL", "{o}", "{o}:fence")
		const c = "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60."
		acq := func(seq string) {
			t.Helper()
			if v, err := lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{o}", "{o}:fence"}, []string{"10000", "h:a", seq}).AsIntSlice(); err != nil || v[0] != 1 {
				t.Fatalf("acquire %s: %v %v", seq, v, err)
			}
		}
		orphans := func(seq string, keep, most int) int64 {
			t.Helper()
			n, err := lua.ReleaseOrphans.Lua(tc.flags).Exec(ctx, tc.c, []string{"{o}"}, []string{"h:a", seq, strconv.Itoa(keep), strconv.Itoa(most)}).AsInt64()
			if err != nil {
				t.Fatalf("release_orphans %s: %v", seq, err)
			}
			return n
		}
		acq(c + "1")
		acq(c + "2")
		acq(c + "3") // Redis counts 3
		if n := orphans(c+"4", 2, 5); n != 2 {
			t.Fatalf("keep 2 of 3, at most 5: %d left, want 2 (one given back)", n)
		}
		if n := orphans(c+"5", 2, 1); n != 2 {
			t.Fatalf("an orphan already gone: %d left, want 2 (the owner's own kept)", n)
		}
		if n := orphans(c+"5", 2, 1); n != 2 {
			t.Fatalf("5 sent again: %d", n)
		}
		if n := orphans(c+"6", 1, 1); n != 1 {
			t.Fatalf("keep 1 of 2: %d", n)
		}
		if n := orphans(c+"6", 1, 1); n != 1 {
			t.Fatalf("6 again is answered from the state, not applied: %d", n)
		}
		if n := orphans(c+"5", 0, 1); n != -3 {
			t.Fatalf("5 arriving after 6 is superseded: %d", n)
		}
		do("DEL", "{o}")
		if n := orphans(c+"7", 1, 1); n != 0 {
			t.Fatalf("no hold: %d", n)
		}
		if n, _ := do("EXISTS", "{o}").AsInt64(); n != 0 {
			t.Fatal("wrote a lock for an owner that holds none")
		}
	})
}

// TestScripts_sharedOwnerSequences: a context owner ('u:') that several Clients share (processes
// using one id: rlock.WithOwner) has each Client's operations ordered apart (lib_seq.lua's
// per-Client numbers): whatever the other Clients applied meanwhile, a Client's replay of an
// applied operation is answered from the state, not applied again, and its send that lingered
// past its later operation applies nothing. Randomized (seed logged) over three Clients, for
// every reentrant lock; the owner's hold count in Redis is checked against the operations
// applied after every step.
func TestScripts_sharedOwnerSequences(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, k := range seqKinds() {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := seqDo(t, tc)
				rng := rand.New(rand.NewPCG(seed, 0))
				const owner = "u:shared"
				clients := []string{"0b8d9c1e7f1a4a559a3e1d2c3b4a5f60.", "1c8d9c1e7f1a4a559a3e1d2c3b4a5f61.", "2d8d9c1e7f1a4a559a3e1d2c3b4a5f62."}
				next := make([]int, len(clients)) // each Client's last number
				// applied: each Client's operations applied, in order: +1 an acquire, -1 a release.
				type op struct {
					seq   string
					delta int
				}
				applied := make([][]op, len(clients))
				holds := 0
				count := func() int {
					t.Helper()
					s, err := do("HGET", "{q}", k.field(owner)).ToString()
					if rueidis.IsRedisNil(err) {
						return 0
					}
					if err != nil {
						t.Fatal(err)
					}
					n, _ := strconv.Atoi(s)
					return n
				}
				for step := 0; step < 200; step++ {
					c := rng.IntN(len(clients))
					var what string
					switch r := rng.IntN(10); {
					case r < 3 && len(applied[c]) > 0:
						// A replay of the Client's last applied operation: answered, not applied.
						last := applied[c][len(applied[c])-1]
						what = "replay " + last.seq
						if last.delta > 0 {
							v, err := k.acq(ctx, tc, owner, last.seq)
							if err != nil || v[0] != 1 {
								t.Fatalf("step %d: %s: %v %v", step, what, v, err)
							}
						} else if n, err := k.rel(ctx, tc, owner, last.seq); err != nil || n < 0 && holds > 0 {
							t.Fatalf("step %d: %s: %d %v", step, what, n, err)
						}
					case r < 4 && len(applied[c]) > 1:
						// A send that lingered past the Client's later operation: applies nothing.
						old := applied[c][len(applied[c])-2]
						what = "late " + old.seq
						if old.delta > 0 {
							if v, err := k.acq(ctx, tc, owner, old.seq); err != nil || v[0] != 0 {
								t.Fatalf("step %d: %s: %v %v", step, what, v, err)
							}
						} else if n, err := k.rel(ctx, tc, owner, old.seq); err != nil || n != -3 && holds > 0 {
							t.Fatalf("step %d: %s: %d %v", step, what, n, err)
						}
					case r < 7 || holds == 0:
						next[c]++
						seq := clients[c] + strconv.Itoa(next[c])
						what = "acquire " + seq
						v, err := k.acq(ctx, tc, owner, seq)
						if err != nil || v[0] != 1 {
							t.Fatalf("step %d: %s: %v %v", step, what, v, err)
						}
						holds++
						applied[c] = append(applied[c], op{seq, 1})
					default:
						next[c]++
						seq := clients[c] + strconv.Itoa(next[c])
						what = "release " + seq
						n, err := k.rel(ctx, tc, owner, seq)
						if err != nil || n != int64(holds-1) {
							t.Fatalf("step %d: %s: %d %v, want %d", step, what, n, err, holds-1)
						}
						holds--
						applied[c] = append(applied[c], op{seq, -1})
						if holds == 0 {
							applied = make([][]op, len(clients)) // the lock is gone, with its numbers
						}
					}
					if got := count(); got != holds {
						t.Fatalf("step %d (%s): Redis counts %d holds, the operations applied %d", step, what, got, holds)
					}
				}
			})
		})
	}
}
