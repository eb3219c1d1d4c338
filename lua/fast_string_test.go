package lua_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// The fast form written as a string, as the fast grant's transaction (MULTI; SET lock
// '~<owner> <seq>' NX PX <lease>; INCR fence; EXEC) writes it: the same form as the hash whose
// only field is token = '~<owner> <seq>' (lib_fast.lua). The scripts that read the lock key as
// a hash read it so; a string that does not start with '~' (a user's value) keeps the answer
// it had.

// fastStr writes the fast form as a string, with a 30 s lease.
func (r *fastRig) fastStr() {
	r.t.Helper()
	r.do("SET", r.key, fastTok, "PX", "30000")
}

// userStr writes a user's string on the lock key.
func (r *fastRig) userStr() {
	r.t.Helper()
	r.do("SET", r.key, "hello", "PX", "30000")
}

func (r *fastRig) str() string {
	r.t.Helper()
	s, _ := r.do("GET", r.key).ToString()
	return s
}

func wrongType(res rueidis.RedisResult) bool {
	err := res.Error()
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// TestForceRelease_fastString: force_release frees the string fast form as the hash one
// (recorded for its owner under the form's text; as seen only by that text and owner); a
// string ghost is free (0, deleted, no record); a user's string stays refused. Before, every
// string was WRONGTYPE.
func TestForceRelease_fastString(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		r := newFastRig(t, tc, "{fs}")
		keys := []string{r.key, r.k(":forced"), r.k(":fence")}
		force := func(seen ...string) int64 {
			t.Helper()
			n, err := r.run(lua.ForceRelease, keys, append([]string{"P{fs}:released", "0", "60000"}, seen...)...).AsInt64()
			if err != nil {
				t.Fatalf("force %v: %v", seen, err)
			}
			return n
		}
		forced := func() string {
			t.Helper()
			s, _ := r.do("HGET", r.k(":forced"), fastOwner).ToString()
			return s
		}
		r.fastStr()
		if n := force(); n != 1 || r.exists() || forced() != fastTok {
			t.Fatalf("force of a string fast form: %d (exists %v, record %q), want 1, freed, recorded", n, r.exists(), forced())
		}
		if pttl, _ := r.do("PTTL", r.k(":forced")).AsInt64(); pttl < 60000 {
			t.Fatalf("forced record's life %d ms, want the lease's rest + 60 s", pttl)
		}
		r.do("DEL", r.k(":forced"))
		r.fastStr()
		for _, seen := range [][]string{{"0", fastOwner}, {fastTok, "h:other"}} {
			if n := force(seen...); n != -1 || r.str() != fastTok {
				t.Fatalf("force as seen %q: %d, want -1 and nothing changed", seen, n)
			}
		}
		if n := force(fastTok, fastOwner); n != 1 || r.exists() {
			t.Fatalf("force as seen: %d, want 1 and freed", n)
		}

		r.do("DEL", r.k(":forced"))
		r.fastStr()
		r.spend(fastSeq, 60000)
		if n := force(); n != 0 || r.exists() {
			t.Fatalf("force of a string ghost: %d (exists %v), want 0 and deleted", n, r.exists())
		}
		if n, _ := r.do("EXISTS", r.k(":forced")).AsInt64(); n != 0 {
			t.Fatal("the force of a string ghost wrote a forced record")
		}

		r.userStr()
		if res := r.run(lua.ForceRelease, keys, "", "0", "60000"); !wrongType(res) || r.str() != "hello" {
			t.Fatalf("force of a user's string: %v, want WRONGTYPE and kept", res.Error())
		}
	})
}

// TestFairScripts_fastString: fair_acquire meets the string fast form as the hash one (held
// by another owner: refused, queued, the lock made its hash form and marked, its lease kept);
// a string ghost is free (granted); fair_release answers -1 on it (the fair owner holds
// nothing), leaving it as it is. A user's string stays WRONGTYPE for both. Before, every
// string was WRONGTYPE.
func TestFairScripts_fastString(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		r := newFastRig(t, tc, "{fq}")
		keys := []string{r.key, r.k(":fence"), r.k(":queue"), r.k(":alive")}
		acquire := func() rueidis.RedisResult {
			return r.run(lua.FairAcquire, keys, "10000", "h:f", "1.1", "10000", "1", "3000", "")
		}
		release := func() rueidis.RedisResult {
			return r.run(lua.FairRelease, []string{r.key, r.k(":rel:x"), r.k(":queue"), r.k(":alive")}, "h:f", "1.2", "", "10000", "", "", "")
		}

		r.fastStr()
		if n, err := release().AsInt64(); err != nil || n != -1 || r.str() != fastTok {
			t.Fatalf("fair release on a string fast form: %d %v, want -1 and nothing changed", n, err)
		}
		v, err := acquire().AsIntSlice()
		if err != nil || v[0] != 0 {
			t.Fatalf("fair acquire on a string fast form: %v %v, want refused", v, err)
		}
		got, _ := r.do("HGETALL", r.key).AsStrMap()
		if fmt.Sprint(got) != fmt.Sprint(map[string]string{"token": fastTok, "w": "1"}) {
			t.Fatalf("after the refusal the lock is %v, want the hash form, marked", got)
		}
		if q, _ := r.do("ZCARD", r.k(":queue")).AsInt64(); q != 1 {
			t.Fatal("the refused waiter is not queued")
		}
		if pttl, _ := r.do("PTTL", r.key).AsInt64(); pttl <= 20000 || pttl > 30000 {
			t.Fatalf("the lock's lease after the conversion: %d ms, want the string's (30 s)", pttl)
		}
		if n, _ := r.do("EXISTS", r.key+":f").AsInt64(); n != 0 {
			t.Fatal("fastHash's key was left behind")
		}

		r.clear()
		r.fastStr()
		r.spend(fastSeq, 60000)
		if v, err := acquire().AsIntSlice(); err != nil || v[0] != 1 || v[2] != 1 {
			t.Fatalf("fair acquire on a string ghost: %v %v, want a grant", v, err)
		}

		r.clear()
		r.userStr()
		if res := acquire(); !wrongType(res) || r.str() != "hello" {
			t.Fatalf("fair acquire on a user's string: %v, want WRONGTYPE and kept", res.Error())
		}
		if res := release(); !wrongType(res) || r.str() != "hello" {
			t.Fatalf("fair release on a user's string: %v, want WRONGTYPE and kept", res.Error())
		}
	})
}

// TestRWScripts_fastString: the read-write lock's scripts meet the string fast form as the
// hash one (WRONGTYPE, nothing written), and a string ghost as a free lock (acquire grants,
// state reads it free, force answers 0, release -1; the writers delete it); a user's string
// stays WRONGTYPE. Before, the string ghost was WRONGTYPE too.
func TestRWScripts_fastString(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		r := newFastRig(t, tc, "{fw}")
		acq := []string{r.key, r.k(":fence"), r.k(":leases"), r.k(":writers")}
		state := []string{r.key, r.k(":leases"), r.k(":fence")}
		rel := []string{r.key, r.k(":rel:x"), r.k(":leases"), r.k(":writers"), r.k(":fence")}
		relArgs := func(kind string) []string {
			return []string{"h:rw", "x", "", "10000", kind, "P{fw}:released", "P{fw}:released:read"}
		}
		calls := []struct {
			name string
			run  func() rueidis.RedisResult
		}{
			{"acquire w", func() rueidis.RedisResult { return r.run(lua.RWAcquire, acq, "10000", "h:rw", "1.1", "w", "3000", "1") }},
			{"acquire r", func() rueidis.RedisResult { return r.run(lua.RWAcquire, acq, "10000", "h:rw", "1.1", "r", "3000", "0") }},
			{"state", func() rueidis.RedisResult { return r.run(lua.RWState, state, "h:rw") }},
			{"force", func() rueidis.RedisResult { return r.run(lua.RWForce, state, "", "") }},
			{"release w", func() rueidis.RedisResult { return r.run(lua.RWRelease, rel, relArgs("w")...) }},
			{"release r", func() rueidis.RedisResult { return r.run(lua.RWRelease, rel, relArgs("r")...) }},
		}
		for _, c := range calls {
			r.clear()
			r.userStr()
			if res := c.run(); !wrongType(res) || r.str() != "hello" {
				t.Fatalf("%s on a user's string: %v, want WRONGTYPE and kept", c.name, res.Error())
			}

			r.clear()
			r.fastStr()
			r.spend("1.9", 60000)
			if res := c.run(); !wrongType(res) || r.str() != fastTok {
				t.Fatalf("%s on a string fast form: %v, want WRONGTYPE and nothing changed", c.name, res.Error())
			}

			r.clear()
			r.fastStr()
			r.spend(fastSeq, 60000)
			res := c.run()
			if err := res.Error(); err != nil {
				t.Fatalf("%s on a string ghost: %v, want it free", c.name, err)
			}
			switch c.name {
			case "acquire w", "acquire r":
				if v, _ := res.AsIntSlice(); v[0] != 1 {
					t.Fatalf("%s on a string ghost: %v, want a grant", c.name, v)
				}
				if m, _ := r.do("HGET", r.key, "mode").ToString(); m == "" {
					t.Fatalf("%s on a string ghost: no read-write lock after the grant", c.name)
				}
			case "state":
				if v, _ := res.AsIntSlice(); fmt.Sprint(v) != "[0 0 0 0]" || r.str() != fastTok {
					t.Fatalf("state of a string ghost: %v, want free and the key left as it is", v)
				}
			case "force":
				if n, _ := res.AsInt64(); n != 0 || r.exists() {
					t.Fatalf("force of a string ghost: %d (exists %v), want 0 and deleted", n, r.exists())
				}
			default:
				if n, _ := res.AsInt64(); n != -1 || r.exists() {
					t.Fatalf("%s on a string ghost: %d (exists %v), want -1 and deleted", c.name, n, r.exists())
				}
			}
		}
		// Without the fence key (an older caller) the string ghost is another kind of lock.
		r.clear()
		r.fastStr()
		r.spend(fastSeq, 60000)
		if !wrongType(r.run(lua.RWState, state[:2], "h:rw")) {
			t.Fatal("state without the fence: want WRONGTYPE")
		}
	})
}

// TestOtherKinds_fastString: the semaphores' and the latch's scripts, which share a Mutex's
// key (rlock's semKeysFor, CountDownLatch), answer WRONGTYPE on its fast form written as a
// string, ghost or not, and leave it, as on its hash form: they know no fast form. It passed
// before the string form's readers too (the string is not a count, nor a hash).
func TestOtherKinds_fastString(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		r := newFastRig(t, tc, "{fo}")
		sem := []string{r.key, r.k(":log"), r.k(":logx")}
		t.Cleanup(func() { r.do("DEL", r.k(":log"), r.k(":logx"), r.k(":req")) })
		calls := []struct {
			name string
			run  func() rueidis.RedisResult
		}{
			{"sem_acquire", func() rueidis.RedisResult { return r.run(lua.SemAcquire, sem, "1", "r1", "10000") }},
			{"sem_release", func() rueidis.RedisResult { return r.run(lua.SemRelease, sem, "1", "r1", "10000", "P{fo}", "0") }},
			{"sem_set", func() rueidis.RedisResult { return r.run(lua.SemSet, sem, "1", "r1", "10000", "P{fo}", "0") }},
			{"sem_drain", func() rueidis.RedisResult { return r.run(lua.SemDrain, sem, "r1", "10000") }},
			{"sem_delete", func() rueidis.RedisResult { return r.run(lua.SemDelete, sem[:1]) }},
			{"latch_set", func() rueidis.RedisResult { return r.run(lua.LatchSet, []string{r.key, r.k(":req")}, "2", "10000") }},
			{"latch_count_down", func() rueidis.RedisResult {
				return r.run(lua.LatchCountDown, []string{r.key, r.k(":req")}, "P{fo}", "*", "10000")
			}},
			{"latch_delete", func() rueidis.RedisResult {
				return r.run(lua.LatchDelete, []string{r.key, r.k(":req")}, "P{fo}", "*", "10000")
			}},
			{"psem_state", func() rueidis.RedisResult { return r.run(lua.PsemState, []string{r.key, r.k(":leases")}, "") }},
			{"psem_acquire", func() rueidis.RedisResult {
				return r.run(lua.PsemAcquire, []string{r.key, r.k(":leases")}, "p1", "10000")
			}},
			{"psem_delete", func() rueidis.RedisResult { return r.run(lua.PsemDelete, []string{r.key, r.k(":leases")}) }},
		}
		for _, c := range calls {
			for _, ghost := range []bool{false, true} {
				r.clear()
				r.fastStr()
				if ghost {
					r.spend(fastSeq, 60000)
				}
				if res := c.run(); !wrongType(res) || r.str() != fastTok {
					t.Fatalf("%s on a string fast form (ghost %v): %v, want WRONGTYPE and kept", c.name, ghost, res.Error())
				}
			}
		}
	})
}
