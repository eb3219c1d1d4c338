package lua_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// seqKind is one reentrant lock's acquire and release, as the sequence tests send them, and
// the hash field that counts an owner's holds.
type seqKind struct {
	name string
	acq  func(ctx context.Context, tc server, owner, seq string) ([]int64, error)
	// give is a release; keep >= 0 makes it the give-back of a hold the Client let go of
	// (ARGV[8]: applied only while the Client counts more than keep holds).
	give  func(ctx context.Context, tc server, owner, seq string, keep int) (int64, error)
	field func(owner string) string
}

// rel is k's plain release.
func (k seqKind) rel(ctx context.Context, tc server, owner, seq string) (int64, error) {
	return k.give(ctx, tc, owner, seq, -1)
}

// withKeep is args with keep as ARGV[8] (ARGV[5..7] empty when args has fewer), or args when
// keep < 0.
func withKeep(args []string, keep int) []string {
	if keep < 0 {
		return args
	}
	for len(args) < 7 {
		args = append(args, "")
	}
	return append(args, strconv.Itoa(keep))
}

// seqKinds are the plain, fair and read-write locks (both sides), on the keys {q}...
func seqKinds() []seqKind {
	const lease = "10000"
	relRW := func(side string) func(ctx context.Context, tc server, owner, seq string, keep int) (int64, error) {
		return func(ctx context.Context, tc server, owner, seq string, keep int) (int64, error) {
			return lua.RWRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:rel:" + seq, "{q}:leases", "{q}:writers"},
				withKeep([]string{owner, seq, "", "10000", side, "", ""}, keep)).AsInt64()
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
		}, func(ctx context.Context, tc server, owner, seq string, keep int) (int64, error) {
			return lua.Release.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:forced"}, withKeep([]string{owner, seq, "", ""}, keep)).AsInt64()
		}, func(o string) string { return o }},
		{"fair", func(ctx context.Context, tc server, owner, seq string) ([]int64, error) {
			return lua.FairAcquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:fence", "{q}:queue", "{q}:alive"},
				[]string{lease, owner, seq, "10000", "0", "3000", ""}).AsIntSlice()
		}, func(ctx context.Context, tc server, owner, seq string, keep int) (int64, error) {
			return lua.FairRelease.Lua(tc.flags).Exec(ctx, tc.c, []string{"{q}", "{q}:rel:" + seq, "{q}:queue", "{q}:alive"},
				withKeep([]string{owner, seq, "", "10000"}, keep)).AsInt64()
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

// TestScripts_giveBackWithKeep: a release with keep (ARGV[8], the give-back of a hold the
// Client let go of) gives back a hold only while the Client counts more than keep of the
// owner's holds (for a handle's owner, the owner's count), and answers -4 writing nothing
// otherwise: a hold whose give-back was applied after all is not given back twice. It
// orders by sequence number like a plain release, and may give back the last hold. For the
// plain, fair and read-write locks (both sides).
func TestScripts_giveBackWithKeep(t *testing.T) {
	for _, k := range seqKinds() {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := seqDo(t, tc)
				const c = "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60."
				acq := func(seq string) {
					t.Helper()
					if v, err := k.acq(ctx, tc, "h:a", seq); err != nil || v[0] != 1 {
						t.Fatalf("acquire %s: %v %v", seq, v, err)
					}
				}
				give := func(seq string, keep int) int64 {
					t.Helper()
					n, err := k.give(ctx, tc, "h:a", seq, keep)
					if err != nil {
						t.Fatalf("give-back %s: %v", seq, err)
					}
					return n
				}
				acq(c + "1")
				acq(c + "2")
				acq(c + "3") // Redis counts 3
				if n := give(c+"4", 2); n != 2 {
					t.Fatalf("keep 2 of 3: %d left, want 2", n)
				}
				// 5: an acquire whose outcome the Client gave up on, still on its way.
				if n := give(c+"6", 2); n != -4 {
					t.Fatalf("keep 2 of 2: %d, want -4 (nothing given back)", n)
				}
				if n := give(c+"6", 2); n != 2 {
					t.Fatalf("6 again is answered from the state: %d", n)
				}
				if n := give(c+"4", 2); n != -3 {
					t.Fatalf("4 arriving after 6 is superseded: %d", n)
				}
				// The acquire numbered 5 lands after the give-back that found nothing: it is
				// refused, not granted past it (before, 6 recorded nothing and 5 re-entered).
				if v, err := k.acq(ctx, tc, "h:a", c+"5"); err != nil || v[0] != 0 {
					t.Fatalf("acquire 5 arriving after give-back 6: %v %v, want refused", v, err)
				}
				if n := give(c+"7", 1); n != 1 {
					t.Fatalf("keep 1 of 2: %d", n)
				}
				if n := give(c+"6", 0); n != -3 {
					t.Fatalf("6 arriving after 7 is superseded: %d", n)
				}
				if n := give(c+"8", 0); n != 0 {
					t.Fatalf("keep 0 of 1: %d, want 0 (the last hold, freed)", n)
				}
				if n, _ := do("EXISTS", "{q}").AsInt64(); n != 0 {
					t.Fatal("the last hold given back, yet the lock is left")
				}
				if n := give(c+"9", 0); n != -1 {
					t.Fatalf("no hold: %d", n)
				}
			})
		})
	}
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

// TestScripts_sharedOwnerCounts: a context owner's q: field counts, per Client, the owner's
// holds that the Client's operations took and did not give back (lib_seq.lua), and a
// give-back with keep applies only while the Client counts more than keep: whatever the
// other Clients did meanwhile, one Client's give-back of a hold it let go of never takes a
// hold that another Client's operation took. Randomized (seed logged) over three Clients and
// every reentrant lock: acquires, releases, give-backs with a random keep, replays, and the
// field rewritten as the scripts wrote it before the counts (no count: read as 0). After
// every step the owner's count, every Client's count (from the field, and as an acquire
// answers it) and the give-backs' answers are checked against a model of the rules.
func TestScripts_sharedOwnerCounts(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, k := range seqKinds() {
		t.Run(k.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, tc server) {
				ctx := context.Background()
				do := seqDo(t, tc)
				rng := rand.New(rand.NewPCG(seed, 1))
				const owner = "u:shared"
				clients := []string{"0b8d9c1e7f1a4a559a3e1d2c3b4a5f60", "1c8d9c1e7f1a4a559a3e1d2c3b4a5f61", "2d8d9c1e7f1a4a559a3e1d2c3b4a5f62"}
				next := make([]int, len(clients))
				// The model: the owner's holds, each Client's count, the Clients in the
				// field's order (most recent first), each Client's last applied operation.
				holds := 0
				mine := make([]int, len(clients))
				var order []int
				type op struct {
					seq  string
					acq  bool
					keep int
				}
				last := make([]*op, len(clients))
				field := func() string {
					s, err := do("HGET", "{q}", "q:"+k.field(owner)).ToString()
					if rueidis.IsRedisNil(err) {
						return ""
					}
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				// applied updates the model for an operation of Client c applied with delta
				// (+1, -1; 0: a give-back with keep that found nothing to give back), as
				// seqPut does.
				applied := func(c, delta int) {
					holds += delta
					if holds == 0 {
						mine = make([]int, len(clients))
						order = nil
						last = make([]*op, len(clients))
						return
					}
					mine[c] = max(0, mine[c]+delta)
					o := []int{c}
					for _, x := range order {
						if x != c {
							o = append(o, x)
						}
					}
					order = o
					over := -holds
					for _, x := range order {
						over += mine[x]
					}
					for _, x := range order {
						if over <= 0 {
							break
						}
						d := min(over, mine[x])
						mine[x] -= d
						over -= d
					}
				}
				for step := 0; step < 300; step++ {
					c := rng.IntN(len(clients))
					newSeq := func() string {
						next[c]++
						return clients[c] + "." + strconv.Itoa(next[c])
					}
					var what string
					switch r := rng.IntN(12); {
					case r < 2 && last[c] != nil:
						// A replay of the Client's last applied operation: answered from the state.
						l := last[c]
						what = "replay " + l.seq
						if l.acq {
							v, err := k.acq(ctx, tc, owner, l.seq)
							if err != nil || len(v) != 4 || v[0] != 1 || v[2] != int64(holds) || v[3] != int64(mine[c]) {
								t.Fatalf("step %d: %s: %v %v, want holds %d, mine %d", step, what, v, err, holds, mine[c])
							}
						} else if n, err := k.give(ctx, tc, owner, l.seq, l.keep); err != nil || n != int64(holds) {
							t.Fatalf("step %d: %s: %d %v, want %d", step, what, n, err, holds)
						}
					case r < 3 && holds > 0:
						// The field as the scripts wrote it before the counts.
						what = "counts dropped"
						v := field()
						var es []string
						for _, e := range strings.Fields(v) {
							es = append(es, strings.SplitN(e, "/", 2)[0])
						}
						do("HSET", "{q}", "q:"+k.field(owner), strings.Join(es, " "))
						mine = make([]int, len(clients))
					case r < 7 || holds == 0:
						seq := newSeq()
						what = "acquire " + seq
						v, err := k.acq(ctx, tc, owner, seq)
						if err != nil || v[0] != 1 {
							t.Fatalf("step %d: %s: %v %v", step, what, v, err)
						}
						applied(c, 1)
						last[c] = &op{seq: seq, acq: true}
						if len(v) != 4 || v[2] != int64(holds) || v[3] != int64(mine[c]) {
							t.Fatalf("step %d: %s: %v, want holds %d, mine %d", step, what, v, holds, mine[c])
						}
					case r < 9:
						seq := newSeq()
						what = "release " + seq
						n, err := k.rel(ctx, tc, owner, seq)
						if err != nil || n != int64(holds-1) {
							t.Fatalf("step %d: %s: %d %v, want %d", step, what, n, err, holds-1)
						}
						applied(c, -1)
						if holds > 0 {
							last[c] = &op{seq: seq, keep: -1}
						}
					default:
						seq := newSeq()
						keep := rng.IntN(mine[c] + 2)
						what = "give-back " + seq + " keep " + strconv.Itoa(keep)
						n, err := k.give(ctx, tc, owner, seq, keep)
						if err != nil {
							t.Fatalf("step %d: %s: %v", step, what, err)
						}
						if mine[c] <= keep {
							if n != -4 {
								t.Fatalf("step %d: %s: %d, want -4 (the Client counts %d)", step, what, n, mine[c])
							}
							// Nothing given back, but the number recorded (the Client's earlier
							// sends are refused after it): a replay is answered from the state.
							applied(c, 0)
							last[c] = &op{seq: seq, keep: keep}
							break
						}
						if n != int64(holds-1) {
							t.Fatalf("step %d: %s: %d, want %d", step, what, n, holds-1)
						}
						applied(c, -1)
						if holds > 0 {
							last[c] = &op{seq: seq, keep: keep}
						}
					}
					// Every Client's count, as the field says it.
					got := make([]int, len(clients))
					for _, e := range strings.Fields(field()) {
						s, n, _ := strings.Cut(e, "/")
						for i, cl := range clients {
							if strings.HasPrefix(s, cl+".") {
								got[i], _ = strconv.Atoi(n)
							}
						}
					}
					sum := 0
					for i := range clients {
						sum += got[i]
						if got[i] != mine[i] {
							t.Fatalf("step %d (%s): Client %d's count is %d in %q, the model's %d", step, what, i, got[i], field(), mine[i])
						}
					}
					if sum > holds {
						t.Fatalf("step %d (%s): the counts add up to %d, beyond the owner's %d holds", step, what, sum, holds)
					}
				}
			})
		})
	}
}
