package lua_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// seedFloor is the largest fence counter that the scripts take as not seeded from the clock
// (lib_fence.lua): a fast grant's INCR of a missing fence counts up from 1.
const seedFloor = 1 << 40

// fastGrant sends the fast grant's transaction (docs/DESIGN.md section 5, "The fast form") for
// owner under seq on lock {f}, and returns 1 when its SET NX wrote the lock (0 when not) and
// INCR's answer (0 and its error when INCR failed).
func fastGrant(t *testing.T, tc server, owner, seq, lease string) (int64, int64, error) {
	t.Helper()
	ctx := context.Background()
	c := tc.c
	res := c.DoMulti(ctx,
		c.B().Multi().Build(),
		c.B().Set().Key("{f}").Value("~"+owner+" "+seq).Nx().PxMilliseconds(mustInt(t, lease)).Build(),
		c.B().Incr().Key("{f}:fence").Build(),
		c.B().Exec().Build())
	exec, err := res[len(res)-1].ToArray()
	if err != nil {
		t.Fatalf("EXEC: %v", err)
	}
	set := int64(0)
	if exec[0].Error() == nil {
		set = 1
	} else if !rueidis.IsRedisNil(exec[0].Error()) {
		t.Fatalf("SET: %v", exec[0].Error())
	}
	tok, ierr := exec[1].AsInt64()
	return set, tok, ierr
}

func mustInt(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestScripts_fastForm: every script of the plain lock reads a lock that a fast grant wrote
// (token field '~<owner> <seq>', no field of the owner) as held once by that owner, its last
// number seq: the owner's re-entry converts it to the full form with the tenure's token (or a
// fresh one when the script answers the grant's own number), another owner is refused (and
// marks it), a lower number of the owner's is refused as superseded, the owner's renewal
// extends it, fast_release frees it (and only it), release.lua gives it back (and records a
// give-back that finds nothing to give), and a fast form whose number the fence records as
// spent (a transaction that lingered past its replay) is free.
func TestScripts_fastForm(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		c := tc.c
		const o, other = "h:o", "h:x"
		reset := func() {
			t.Helper()
			if err := c.Do(ctx, c.B().Del().Key("{f}", "{f}:fence").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		acq := func(owner, seq string, extra ...string) []int64 {
			t.Helper()
			args := append([]string{"10000", owner, seq}, extra...)
			v, err := lua.Acquire.Lua(tc.flags).Exec(ctx, c, []string{"{f}", "{f}:fence"}, args).AsIntSlice()
			if err != nil {
				t.Fatalf("acquire %s %s: %v", owner, seq, err)
			}
			return v
		}
		rel := func(owner, seq string, extra ...string) int64 {
			t.Helper()
			args := append([]string{owner, seq, "P{f}:released", ""}, extra...)
			v, err := lua.Release.Lua(tc.flags).Exec(ctx, c, []string{"{f}"}, args).AsInt64()
			if err != nil {
				t.Fatalf("release %s %s: %v", owner, seq, err)
			}
			return v
		}
		fastRel := func(owner, seq string) int64 {
			t.Helper()
			v, err := lua.FastRelease.Lua(tc.flags).Exec(ctx, c, []string{"{f}"}, []string{owner, seq, "P{f}:released"}).AsInt64()
			if err != nil {
				t.Fatalf("fast_release: %v", err)
			}
			return v
		}
		field := func(f string) string {
			t.Helper()
			v, err := c.Do(ctx, c.B().Hget().Key("{f}").Field(f).Build()).ToString()
			if rueidis.IsRedisNil(err) {
				return ""
			}
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		exists := func() bool {
			n, err := c.Do(ctx, c.B().Exists().Key("{f}").Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		pttl := func(k string) int64 {
			n, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		t.Run("grant on a free lock, missing fence: resend converts with a seeded token", func(t *testing.T) {
			reset()
			set, tok, err := fastGrant(t, tc, o, "c.1", "10000")
			if set != 1 || err != nil || tok != 1 {
				t.Fatalf("transaction: HSETNX %d INCR %d %v", set, tok, err)
			}
			if p := pttl("{f}"); p <= 0 || p > 10000 {
				t.Fatalf("lease %d", p)
			}
			// INCR answered 1: no token. The Client resends the acquire under the same number.
			v := acq(o, "c.1")
			if len(v) != 3 || v[0] != 1 || v[1] <= seedFloor || v[2] != 1 {
				t.Fatalf("conversion answered %v", v)
			}
			if field(o) != "1" || field("q:"+o) != "c.1" || field("token") != strconv.FormatInt(v[1], 10) {
				t.Fatalf("not the full form: %s %s %s", field(o), field("q:"+o), field("token"))
			}
			if p := pttl("{f}:fence"); p <= 0 {
				t.Fatalf("fence left without an expiry: pttl %d", p)
			}
			// Answered again from the state.
			if w := acq(o, "c.1"); w[1] != v[1] || w[2] != 1 {
				t.Fatalf("replay answered %v, want %v", w, v)
			}
		})

		t.Run("re-entry converts with the Client's token; a lower number is superseded", func(t *testing.T) {
			reset()
			acq(other, "z.1")
			rel(other, "z.2") // a seeded fence
			set, tok, err := fastGrant(t, tc, o, "c.5", "10000")
			if set != 1 || err != nil || tok <= seedFloor {
				t.Fatalf("transaction: HSETNX %d INCR %d %v", set, tok, err)
			}
			if v := acq(o, "c.4"); v[0] != 0 || v[1] != 0 {
				t.Fatalf("a lower number answered %v, want {0 0}", v)
			}
			if v := acq(o, "c.6", "", "", strconv.FormatInt(tok, 10)); len(v) != 3 || v[1] != tok || v[2] != 2 {
				t.Fatalf("re-entry answered %v, want {1 %d 2}", v, tok)
			}
			if field(o) != "2" || field("q:"+o) != "c.6" || field("token") != strconv.FormatInt(tok, 10) {
				t.Fatalf("not the full form: %s %s %s", field(o), field("q:"+o), field("token"))
			}
			if n := fastRel(o, "c.5"); n != -5 {
				t.Fatalf("fast_release of a converted lock: %d, want -5", n)
			}
			if rel(o, "c.7") != 1 || rel(o, "c.8") != 0 || exists() {
				t.Fatal("the converted lock was not released")
			}
		})

		t.Run("another owner is refused and marks; the owner's renewal extends; fast_release frees", func(t *testing.T) {
			reset()
			if set, _, _ := fastGrant(t, tc, o, "c.1", "5000"); set != 1 {
				t.Fatal("not granted")
			}
			if v := acq(other, "z.1", "1"); v[0] != 0 || v[1] <= 0 {
				t.Fatalf("another owner answered %v", v)
			}
			if field("w") != "1" {
				t.Fatal("the refusal did not mark the lock")
			}
			if set, _, _ := fastGrant(t, tc, other, "z.2", "5000"); set != 0 {
				t.Fatal("a second fast grant took a held lock")
			}
			if p := pttl("{f}"); p > 5000 {
				t.Fatalf("a refused fast grant changed the lease: %d", p)
			}
			renew := func(owner, form string) int64 {
				t.Helper()
				out, err := lua.Renew.Lua(tc.flags).Exec(ctx, c, []string{"{f}"}, []string{"20000", owner, form}).AsIntSlice()
				if err != nil {
					t.Fatal(err)
				}
				return out[0]
			}
			if n := renew(o, "~"+o+" c.0"); n != 0 {
				t.Fatal("the renewal of another fast grant of the owner's (a ghost's) renewed this one")
			}
			if n := renew(o, "~"+o+" c.1"); n != 1 || pttl("{f}") <= 5000 {
				t.Fatalf("renewal: %d pttl %d", n, pttl("{f}"))
			}
			if n := renew(other, "~"+other+" c.1"); n != 0 {
				t.Fatal("another owner's renewal renewed it")
			}
			if n := fastRel(other, "c.1"); n != -5 {
				t.Fatalf("fast_release by another owner: %d, want -5", n)
			}
			if n := fastRel(o, "c.1"); n != 0 || exists() {
				t.Fatalf("fast_release: %d, exists %v", n, exists())
			}
			if n := fastRel(o, "c.1"); n != -1 {
				t.Fatalf("fast_release of a free lock: %d, want -1", n)
			}
		})

		t.Run("release.lua gives it back, and records a give-back that finds nothing", func(t *testing.T) {
			reset()
			fastGrant(t, tc, o, "c.1", "10000")
			if n := rel(o, "c.2", "", "", "", "1"); n != -4 {
				t.Fatalf("give-back with keep 1: %d, want -4", n)
			}
			if v := acq(o, "c.1"); v[0] != 0 || v[1] != 0 {
				t.Fatalf("a number below the recorded give-back answered %v", v)
			}
			if n := rel(o, "c.3", "", "", "", "0"); n != 0 || exists() {
				t.Fatalf("give-back with keep 0: %d, exists %v", n, exists())
			}
			fastGrant(t, tc, o, "c.4", "10000")
			// A replay of an Unlock names the Client's token: the fast form is that tenure.
			n, err := lua.Release.Lua(tc.flags).Exec(ctx, c, []string{"{f}", "{f}"}, []string{o, "c.5", "P{f}:released", "12345"}).AsInt64()
			if err != nil || n != 0 || exists() {
				t.Fatalf("release replay: %d %v", n, err)
			}
		})

		t.Run("a fast form whose number was spent is a ghost: free", func(t *testing.T) {
			reset()
			acq(other, "z.1")
			// o's replay under its number c.9, refused while other held the lock, spent it.
			if v := acq(o, "+c.9"); v[0] != 0 {
				t.Fatalf("replay answered %v", v)
			}
			rel(other, "z.2")
			// The transaction lands now: the fence holds records, so its INCR fails.
			set, _, err := fastGrant(t, tc, o, "c.9", "10000")
			if set != 1 || err == nil {
				t.Fatalf("late transaction: HSETNX %d, INCR error %v", set, err)
			}
			v := acq(other, "z.3")
			if v[0] != 1 || v[2] != 1 || field(other) != "1" {
				t.Fatalf("another owner on the ghost answered %v", v)
			}
			if rel(other, "z.4") != 0 {
				t.Fatal("not released")
			}
			// The owner's own resend of the spent number grants nothing, and clears the ghost.
			fastGrant(t, tc, o, "c.9", "10000")
			if v := acq(o, "c.9"); v[0] != 0 || v[1] != 0 || exists() {
				t.Fatalf("the spent number answered %v, exists %v", v, exists())
			}
		})

		t.Run("the string form: renewed when named, freed by fast_release, converted by a script", func(t *testing.T) {
			reset()
			acq(other, "z.1")
			rel(other, "z.2") // a seeded fence
			if set, _, _ := fastGrant(t, tc, o, "c.1", "5000"); set != 1 {
				t.Fatal("not granted")
			}
			typ, _ := c.Do(ctx, c.B().Type().Key("{f}").Build()).ToString()
			if typ != "string" {
				t.Fatalf("the transaction wrote a %s", typ)
			}
			out, err := lua.Renew.Lua(tc.flags).Exec(ctx, c, []string{"{f}"}, []string{"20000", o, "~" + o + " c.0"}).AsIntSlice()
			if err != nil || out[0] != 0 {
				t.Fatalf("a renewal naming another form of the owner's: %v %v", out, err)
			}
			out, err = lua.Renew.Lua(tc.flags).Exec(ctx, c, []string{"{f}"}, []string{"20000", o, "~" + o + " c.1"}).AsIntSlice()
			if err != nil || out[0] != 1 || pttl("{f}") <= 5000 {
				t.Fatalf("renewal: %v %v pttl %d", out, err, pttl("{f}"))
			}
			if n := fastRel(other, "c.1"); n != -5 {
				t.Fatalf("fast_release by another owner: %d", n)
			}
			if n := fastRel(o, "c.1"); n != 0 || exists() {
				t.Fatalf("fast_release of the string: %d", n)
			}
			// A script that meets it makes it a hash, keeping its expiry.
			fastGrant(t, tc, o, "c.2", "5000")
			if v := acq(other, "z.3", "1"); v[0] != 0 {
				t.Fatalf("another owner on the string answered %v", v)
			}
			typ, _ = c.Do(ctx, c.B().Type().Key("{f}").Build()).ToString()
			if typ != "hash" || field("token") != "~"+o+" c.2" || field("w") != "1" || pttl("{f}") <= 0 || pttl("{f}") > 5000 {
				t.Fatalf("converted to %s token %q w %q pttl %d", typ, field("token"), field("w"), pttl("{f}"))
			}
			if v := acq(o, "c.3", "", "", "77"); v[1] != 77 || v[2] != 2 {
				t.Fatalf("re-entry answered %v", v)
			}
			// A user's string at the key is left alone: the acquire's error, nothing written.
			reset()
			if err := c.Do(ctx, c.B().Set().Key("{f}").Value("users").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if _, err := lua.Acquire.Lua(tc.flags).Exec(ctx, c, []string{"{f}", "{f}:fence"}, []string{"10000", o, "c.9"}).AsIntSlice(); err == nil {
				t.Fatal("an acquire on a user's string succeeded")
			}
			if v, _ := c.Do(ctx, c.B().Get().Key("{f}").Build()).ToString(); v != "users" || pttl("{f}") != -1 {
				t.Fatalf("the user's string changed: %q pttl %d", v, pttl("{f}"))
			}
		})

		t.Run("a fence that fails the conversion undoes the grant; a refused grant's new fence expires", func(t *testing.T) {
			reset()
			if err := c.Do(ctx, c.B().Hset().Key("{f}:fence").FieldValue().FieldValue("x", "1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			set, _, err := fastGrant(t, tc, o, "c.1", "10000")
			if set != 1 || err == nil {
				t.Fatalf("transaction on a fence of another type: SET %d, INCR %v", set, err)
			}
			if _, err := lua.Acquire.Lua(tc.flags).Exec(ctx, c, []string{"{f}", "{f}:fence"}, []string{"10000", o, "c.1"}).AsIntSlice(); err == nil {
				t.Fatal("the conversion on a fence of another type succeeded")
			}
			if exists() {
				t.Fatal("the failed conversion left the fast grant in place")
			}
			reset()
			acq(other, "z.1")
			if err := c.Do(ctx, c.B().Del().Key("{f}:fence").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			set, tok, _ := fastGrant(t, tc, o, "c.2", "10000")
			if set != 0 || tok != 1 {
				t.Fatalf("transaction on a held lock, no fence: SET %d INCR %d", set, tok)
			}
			if v := acq(o, "c.2", "1", "", "", "s"); v[0] != 0 {
				t.Fatalf("the resend answered %v", v)
			}
			if p := pttl("{f}:fence"); p <= 0 || p > 1000 {
				t.Fatalf("the fence the refused transaction made: pttl %d", p)
			}
			// Refused by the owner's own hold, which the resend re-enters (review19).
			reset()
			acq(o, "c.3")
			if err := c.Do(ctx, c.B().Del().Key("{f}:fence").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if set, tok, _ := fastGrant(t, tc, o, "c.4", "10000"); set != 0 || tok != 1 {
				t.Fatalf("transaction on the owner's own hold: SET %d INCR %d", set, tok)
			}
			if v := acq(o, "c.4", "", "", "", "s"); v[0] != 1 || v[2] != 2 {
				t.Fatalf("the resend answered %v, want a re-entry", v)
			}
			if p := pttl("{f}:fence"); p <= 0 || p > 1000 {
				t.Fatalf("the fence the transaction made beside a re-entry: pttl %d", p)
			}
		})

		t.Run("an unseeded counter is seeded by the next script grant", func(t *testing.T) {
			reset()
			if err := c.Do(ctx, c.B().Set().Key("{f}:fence").Value("7").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			v := acq(other, "z.1")
			if v[0] != 1 || v[1] <= seedFloor {
				t.Fatalf("grant on a counter of 8 answered %v", v)
			}
			if p := pttl("{f}:fence"); p <= 0 {
				t.Fatalf("fence without an expiry: %d", p)
			}
		})
	})
}
