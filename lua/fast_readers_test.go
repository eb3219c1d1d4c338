package lua_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// The fast form of a plain lock (lib_fast.lua, docs/DESIGN.md section 5), written by hand in
// one of its two shapes: the string '~<owner> <seq>', as the fast grant's transaction (MULTI;
// SET lock '~<owner> <seq>' NX PX <lease>; INCR fence; EXEC) writes it, or the hash whose token
// field is that string, as a script makes it of the string (fastHash). Every script that reads
// the lock key as a hash reads both alike; a string that does not start with '~' (a user's
// value) keeps the answer it had.
const (
	fastOwner = "h:abc"
	fastSeq   = "7.3"
	fastTok   = "~" + fastOwner + " " + fastSeq
)

// fastShape is one of the two ways the fast form is written.
type fastShape struct {
	name string // the subtest's name; the lock key's TYPE
	// fields: the form carries fields besides token (a waiter's mark w, the owner's own
	// count). Only the hash does; the cases about them run on it only.
	fields bool
}

var (
	hashShape   = fastShape{name: "hash", fields: true}
	stringShape = fastShape{name: "string", fields: false}
	fastShapes  = []fastShape{hashShape, stringShape}
)

// fastRig writes fast forms of one shape, full forms and fence records on one lock's keys.
type fastRig struct {
	t     *testing.T
	tc    server
	key   string // the lock; its fence, queue... are key + ":fence"...
	shape fastShape
}

func newFastRig(t *testing.T, tc server, key string, shape fastShape) *fastRig {
	r := &fastRig{t: t, tc: tc, key: key, shape: shape}
	r.clear()
	t.Cleanup(r.clear)
	return r
}

// eachFastShape runs fn on each server, once per shape of the fast form (subtests "hash" and
// "string"), with a rig on key.
func eachFastShape(t *testing.T, key string, fn func(t *testing.T, r *fastRig)) {
	eachServer(t, func(t *testing.T, tc server) {
		for _, s := range fastShapes {
			t.Run(s.name, func(t *testing.T) { fn(t, newFastRig(t, tc, key, s)) })
		}
	})
}

func (r *fastRig) k(suffix string) string { return r.key + suffix }

func (r *fastRig) clear() {
	ks := []string{r.key}
	for _, s := range []string{":fence", ":forced", ":queue", ":alive", ":leases", ":writers", ":rel:x"} {
		ks = append(ks, r.key+s)
	}
	r.tc.c.Do(context.Background(), r.tc.c.B().Del().Key(ks...).Build())
}

func (r *fastRig) do(args ...string) rueidis.RedisResult {
	r.t.Helper()
	res := r.tc.c.Do(context.Background(), r.tc.c.B().Arbitrary(args...).Build())
	if err := res.NonRedisError(); err != nil {
		r.t.Fatalf("%v: %v", args, err)
	}
	return res
}

func (r *fastRig) run(s *lua.Script, keys []string, args ...string) rueidis.RedisResult {
	return s.Lua(r.tc.flags && s.HasFlags()).Exec(context.Background(), r.tc.c, keys, args)
}

// fast writes the fast form in the rig's shape, with a 30 s lease: the hash with token =
// fastTok (and more fields, name then value), or the string fastTok (more is then a test's
// mistake: a string has no fields).
func (r *fastRig) fast(more ...string) {
	r.t.Helper()
	if !r.shape.fields {
		if len(more) > 0 {
			r.t.Fatalf("the string form carries no fields: %q", more)
		}
		r.do("SET", r.key, fastTok, "PX", "30000")
		return
	}
	r.do(append([]string{"HSET", r.key, "token", fastTok}, more...)...)
	r.do("PEXPIRE", r.key, "30000")
}

// more returns fields kv for a shape that carries fields besides token (the hash), none for
// the string.
func (r *fastRig) more(kv ...string) []string {
	if !r.shape.fields {
		return nil
	}
	return kv
}

// intact reports whether the lock is still the fast form fast wrote, in the rig's shape: a
// key of its type whose text (the string, or the hash's token field) is fastTok.
func (r *fastRig) intact() bool {
	r.t.Helper()
	if typ, _ := r.do("TYPE", r.key).ToString(); typ != r.shape.name {
		return false
	}
	if !r.shape.fields {
		return r.str() == fastTok
	}
	s, _ := r.do("HGET", r.key, "token").ToString()
	return s == fastTok
}

// userStr writes a user's string on the lock key.
func (r *fastRig) userStr() {
	r.t.Helper()
	r.do("SET", r.key, "hello", "PX", "30000")
}

// str returns the lock key's string value ("" when it is none).
func (r *fastRig) str() string {
	r.t.Helper()
	s, _ := r.do("GET", r.key).ToString()
	return s
}

func wrongType(res rueidis.RedisResult) bool {
	err := res.Error()
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// full writes owner's full form with acquire.lua, as today's plain lock does.
func (r *fastRig) full(owner string) {
	r.t.Helper()
	v, err := r.run(lua.Acquire, []string{r.key, r.k(":fence")}, "10000", owner, "9.1").AsIntSlice()
	if err != nil || v[0] != 1 {
		r.t.Fatalf("full form of %s: %v %v", owner, v, err)
	}
}

// spend records seq as spent in the fence, until the server's clock plus ms (negative: a
// record that has run out).
func (r *fastRig) spend(seq string, ms int64) {
	r.t.Helper()
	tm, err := r.do("TIME").AsStrSlice()
	if err != nil {
		r.t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	now := sec*1000 + usec/1000
	r.do("SET", r.k(":fence"), fmt.Sprintf("1000/9.9/%d/%s/%d", now+60000, seq, now+ms), "PX", "60000")
}

func (r *fastRig) exists() bool {
	r.t.Helper()
	n, _ := r.do("EXISTS", r.key).AsInt64()
	return n == 1
}

// TestForceRelease_fastForm: force_release frees a fast form, in either shape, like any held
// lock and records its text as the forced tenure of its owner, for the lease's rest and a
// minute; as seen (ARGV[4]) the fast form's token is that text too ('0' does not match it,
// nor another owner, nor another number); the hash form's own count field of the owner, when
// there, rules; a ghost (its <seq> spent in the fence, KEYS[3]) is a free lock: deleted, no
// record, 0, as seen or not; a record that ran out spends nothing; without the fence key (an
// older caller) a spent fast form is taken as held; a user's string stays WRONGTYPE, kept.
// Before, the force found no owner in a fast form: it recorded nothing, and freed it whatever
// was seen; every string was WRONGTYPE.
func TestForceRelease_fastForm(t *testing.T) {
	eachFastShape(t, "{ff}", func(t *testing.T, r *fastRig) {
		keys := []string{r.key, r.k(":forced"), r.k(":fence")}
		force := func(seen ...string) int64 {
			t.Helper()
			n, err := r.run(lua.ForceRelease, keys, append([]string{"P{ff}:released", "0", "60000"}, seen...)...).AsInt64()
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

		r.fast()
		if n := force(); n != 1 || r.exists() {
			t.Fatalf("force of a fast form: %d (exists %v), want 1 and freed", n, r.exists())
		}
		if got := forced(); got != fastTok {
			t.Fatalf("forced record of %s: %q, want %q", fastOwner, got, fastTok)
		}
		if pttl, _ := r.do("PTTL", r.k(":forced")).AsInt64(); pttl < 60000 {
			t.Fatalf("forced record's life %d ms, want the lease's rest + 60 s", pttl)
		}

		// As seen: the form's text and the owner, nothing else.
		r.do("DEL", r.k(":forced"))
		r.fast(r.more("w", "1")...)
		for _, seen := range [][]string{{"0", fastOwner}, {fastTok}, {fastTok, "h:other"}, {"~h:abc 7.2", fastOwner}} {
			if n := force(seen...); n != -1 || !r.intact() {
				t.Fatalf("force as seen %q: %d, want -1 and nothing changed", seen, n)
			}
		}
		if n := force(fastTok, fastOwner); n != 1 || r.exists() || forced() != fastTok {
			t.Fatalf("force as seen: %d (exists %v, record %q), want 1, freed, recorded", n, r.exists(), forced())
		}

		if r.shape.fields {
			// The owner's own count field rules (and the owner is recorded once).
			r.do("DEL", r.k(":forced"))
			r.fast(fastOwner, "2")
			r.spend(fastSeq, 60000)
			if n := force(fastTok, fastOwner); n != 1 || forced() != fastTok {
				t.Fatalf("force of a fast form with the owner's count: %d, record %q", n, forced())
			}
		}

		// A ghost: free.
		r.do("DEL", r.k(":forced"))
		r.fast(r.more("w", "1")...)
		r.spend(fastSeq, 60000)
		if n := force(); n != 0 || r.exists() {
			t.Fatalf("force of a ghost: %d (exists %v), want 0 and deleted", n, r.exists())
		}
		if n, _ := r.do("EXISTS", r.k(":forced")).AsInt64(); n != 0 {
			t.Fatal("the force of a ghost wrote a forced record")
		}
		r.fast()
		if n := force("0", fastOwner); n != 0 || r.exists() {
			t.Fatalf("force as seen of a ghost: %d (exists %v), want 0 and deleted", n, r.exists())
		}
		// A record that ran out spends nothing: held.
		r.spend(fastSeq, -1000)
		r.fast()
		if n := force(); n != 1 || forced() != fastTok {
			t.Fatalf("force of a fast form whose record ran out: %d, record %q", n, forced())
		}
		// Without the fence key (an older caller), a spent fast form is taken as held.
		r.spend(fastSeq, 60000)
		r.fast()
		if n, err := r.run(lua.ForceRelease, keys[:2], "", "0", "60000").AsInt64(); err != nil || n != 1 {
			t.Fatalf("force without the fence: %d %v, want 1", n, err)
		}

		if r.shape == stringShape {
			// A user's string (not a fast form): refused, as before.
			r.userStr()
			if res := r.run(lua.ForceRelease, keys, "", "0", "60000"); !wrongType(res) || r.str() != "hello" {
				t.Fatalf("force of a user's string: %v, want WRONGTYPE and kept", res.Error())
			}
		}
	})
}

// TestFairScripts_fastForm: a fair lock's acquire meets a plain lock's fast form, in either
// shape, as it meets its full form held by another owner (refused with the same sleep,
// queued, the lock marked), leaving the hash form {token, w} with the form's lease (the
// string made that hash, no temporary key left); fair_release answers -1 on it (the fair
// owner holds nothing), leaving it as it is; a ghost is a free lock, taken (the fast owner
// holds nothing after); on the hash form the owner's own count field rules (held); a user's
// string stays WRONGTYPE for both scripts, kept. Before, the ghost was held, and every string
// was WRONGTYPE.
func TestFairScripts_fastForm(t *testing.T) {
	eachFastShape(t, "{fa}", func(t *testing.T, r *fastRig) {
		keys := []string{r.key, r.k(":fence"), r.k(":queue"), r.k(":alive")}
		acquireRes := func() rueidis.RedisResult {
			return r.run(lua.FairAcquire, keys, "10000", "h:f", "1.1", "10000", "1", "3000", "")
		}
		acquire := func() []int64 {
			t.Helper()
			v, err := acquireRes().AsIntSlice()
			if err != nil {
				t.Fatalf("fair acquire: %v", err)
			}
			return v
		}
		release := func() rueidis.RedisResult {
			return r.run(lua.FairRelease, []string{r.key, r.k(":rel:x"), r.k(":queue"), r.k(":alive")}, "h:f", "1.2", "", "10000", "", "", "")
		}
		type seen struct {
			reply  []int64
			w      bool
			queued bool
		}
		look := func(v []int64) seen {
			w, _ := r.do("HEXISTS", r.key, "w").AsInt64()
			q, _ := r.do("ZCARD", r.k(":queue")).AsInt64()
			return seen{v, w == 1, q == 1}
		}
		r.full("h:m")
		want := look(acquire())
		if want.reply[0] != 0 || !want.w || !want.queued {
			t.Fatalf("on a full form held by another owner: %+v", want)
		}
		r.clear()
		r.fast()
		r.spend("1.9", 60000) // another number's record: not a ghost
		if n, err := release().AsInt64(); err != nil || n != -1 || !r.intact() {
			t.Fatalf("fair release on a fast form: %d %v, want -1 and nothing changed", n, err)
		}
		got := look(acquire())
		if got.reply[0] != 0 || got.reply[1] != want.reply[1] || got.w != want.w || got.queued != want.queued {
			t.Fatalf("on a fast form: %+v, want %+v as on a full form", got, want)
		}
		if h, _ := r.do("HGETALL", r.key).AsStrMap(); fmt.Sprint(h) != fmt.Sprint(map[string]string{"token": fastTok, "w": "1"}) {
			t.Fatalf("after the refusal the lock is %v, want the hash form, marked", h)
		}
		if pttl, _ := r.do("PTTL", r.key).AsInt64(); pttl <= 20000 || pttl > 30000 {
			t.Fatalf("the lock's lease after the refusal: %d ms, want the form's (30 s)", pttl)
		}
		if n, _ := r.do("EXISTS", r.key+":f").AsInt64(); n != 0 {
			t.Fatal("fastHash's key was left behind")
		}

		r.clear()
		r.fast(r.more("w", "1")...)
		r.spend(fastSeq, 60000)
		v := acquire()
		if v[0] != 1 || v[2] != 1 {
			t.Fatalf("on a ghost: %v, want a grant", v)
		}
		if s, _ := r.do("HGET", r.key, "token").ToString(); strings.HasPrefix(s, "~") || s != strconv.FormatInt(v[1], 10) {
			t.Fatalf("after the grant on a ghost the token is %q, want %d", s, v[1])
		}
		if n, _ := r.do("HEXISTS", r.key, fastOwner).AsInt64(); n != 0 {
			t.Fatal("the ghost's owner holds after the grant")
		}

		if r.shape.fields {
			// The owner's own count field rules: held.
			r.clear()
			r.fast(fastOwner, "1")
			r.spend(fastSeq, 60000)
			if v := acquire(); v[0] != 0 {
				t.Fatalf("on a spent fast form with its owner's count: %v, want refused", v)
			}
		}

		if r.shape == stringShape {
			// A user's string (not a fast form): WRONGTYPE, as before.
			r.clear()
			r.userStr()
			if res := acquireRes(); !wrongType(res) || r.str() != "hello" {
				t.Fatalf("fair acquire on a user's string: %v, want WRONGTYPE and kept", res.Error())
			}
			if res := release(); !wrongType(res) || r.str() != "hello" {
				t.Fatalf("fair release on a user's string: %v, want WRONGTYPE and kept", res.Error())
			}
		}
	})
}

// TestRWScripts_fastForm: the read-write lock's scripts meet a plain lock's fast form, in
// either shape, as its full form (another kind of lock: WRONGTYPE, nothing written); a ghost
// is a free lock (acquire grants, state reads it free and leaves it, force answers 0, release
// answers -1; the writers delete it); without the fence key (an older caller) the ghost is
// another kind of lock; a user's string stays WRONGTYPE, kept. Before, the ghost was another
// kind of lock too.
func TestRWScripts_fastForm(t *testing.T) {
	eachFastShape(t, "{fr}", func(t *testing.T, r *fastRig) {
		acq := []string{r.key, r.k(":fence"), r.k(":leases"), r.k(":writers")}
		state := []string{r.key, r.k(":leases"), r.k(":fence")}
		rel := []string{r.key, r.k(":rel:x"), r.k(":leases"), r.k(":writers"), r.k(":fence")}
		relArgs := func(kind string) []string {
			return []string{"h:rw", "x", "", "10000", kind, "P{fr}:released", "P{fr}:released:read"}
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
			r.full("h:m")
			if !wrongType(c.run()) {
				t.Fatalf("%s on a full form: want WRONGTYPE", c.name)
			}
			if r.shape == stringShape {
				// A user's string (not a fast form): WRONGTYPE, as before.
				r.clear()
				r.userStr()
				if res := c.run(); !wrongType(res) || r.str() != "hello" {
					t.Fatalf("%s on a user's string: %v, want WRONGTYPE and kept", c.name, res.Error())
				}
			}

			r.clear()
			r.fast()
			r.spend("1.9", 60000)
			if res := c.run(); !wrongType(res) || !r.intact() {
				t.Fatalf("%s on a fast form: %v, want WRONGTYPE as on a full form, nothing changed", c.name, res.Error())
			}

			r.clear()
			r.fast(r.more("w", "1")...)
			r.spend(fastSeq, 60000)
			res := c.run()
			if err := res.Error(); err != nil {
				t.Fatalf("%s on a ghost: %v, want it free", c.name, err)
			}
			switch c.name {
			case "acquire w", "acquire r":
				if v, _ := res.AsIntSlice(); v[0] != 1 {
					t.Fatalf("%s on a ghost: %v, want a grant", c.name, v)
				}
				if m, _ := r.do("HGET", r.key, "mode").ToString(); m == "" {
					t.Fatalf("%s on a ghost: no read-write lock after the grant", c.name)
				}
			case "state":
				if v, _ := res.AsIntSlice(); fmt.Sprint(v) != "[0 0 0 0]" || !r.intact() {
					t.Fatalf("state of a ghost: %v, want free and the key left as it is", v)
				}
			case "force":
				if n, _ := res.AsInt64(); n != 0 || r.exists() {
					t.Fatalf("force of a ghost: %d (exists %v), want 0 and deleted", n, r.exists())
				}
			default:
				if n, _ := res.AsInt64(); n != -1 || r.exists() {
					t.Fatalf("%s on a ghost: %d (exists %v), want -1 and deleted", c.name, n, r.exists())
				}
			}
		}
		// Without the fence key (rw_state, rw_force and rw_release of an older caller) the
		// ghost is still another kind of lock.
		r.clear()
		r.fast()
		r.spend(fastSeq, 60000)
		if !wrongType(r.run(lua.RWState, state[:2], "h:rw")) {
			t.Fatal("state without the fence: want WRONGTYPE")
		}
	})
}
