package lua_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// core are the reentrant lock's scripts (TestScripts_compile).
var core = []*lua.Script{lua.Acquire, lua.Release, lua.Renew, lua.ForceRelease}

// mustRunWhenFull are the scripts that give something back or keep a hold alive: they must
// run on a full (noeviction) server, with allow-oom. Scripts that create data must not.
var mustRunWhenFull = map[*lua.Script]bool{
	lua.Release: true, lua.FastRelease: true, lua.FairRelease: true, lua.FairLeave: true,
	lua.RWRelease: true, lua.RWRenewRead: true, lua.RWRenewWrite: true, lua.RWLeave: true,
	lua.SemRelease: true, lua.PsemRelease: true,
	lua.LatchCountDown: true, lua.LatchDelete: true,
}

func TestScripts_haveHeaders(t *testing.T) {
	if len(lua.All()) < 29 {
		t.Fatalf("only %d scripts registered", len(lua.All()))
	}
	for _, s := range lua.All() {
		src := s.Source()
		if !strings.Contains(src, "KEYS[") || !strings.Contains(src, "returns") {
			t.Errorf("%s: the header must name KEYS, ARGV and the replies", s.Name())
		}
		if s.HasFlags() != strings.HasPrefix(src, "#!lua flags=") {
			t.Errorf("%s: HasFlags disagrees with the source", s.Name())
		}
		if s.Lua(false) == nil || s.Lua(true) == nil {
			t.Errorf("%s: missing form", s.Name())
		}
		if mustRunWhenFull[s] && !s.HasFlags() {
			t.Errorf("%s must run with allow-oom: it gives back or keeps alive", s.Name())
		}
	}
	if lua.Acquire.HasFlags() || lua.LatchSet.HasFlags() || lua.FairAcquire.HasFlags() {
		t.Error("a script that creates data must not run on a full server")
	}
}

// TestScripts_compile runs each script once against a real server (with its flags) and
// miniredis (without), on keys that exist nowhere: every form must compile and answer.
func TestScripts_compile(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		runs := map[*lua.Script][2][]string{
			lua.Acquire:      {{"{t}", "{t}:fence"}, {"1000", "o", "r1"}},
			lua.Release:      {{"{t}", "{t}:rel"}, {"o", "r2", "P{t}:released", "10000"}},
			lua.Renew:        {{"{t}"}, {"1000", "o"}},
			lua.ForceRelease: {{"{t}"}, {"P{t}:released"}},
		}
		for _, s := range core {
			r := runs[s]
			if err := s.Lua(tc.flags).Exec(ctx, tc.c, r[0], r[1]).Error(); err != nil {
				t.Errorf("%s: %v", s.Name(), err)
			}
		}
	})
}

func TestIsShebangError(t *testing.T) {
	_, mini := redistest.Miniredis(t)
	err := lua.Release.Lua(true).Exec(context.Background(), mini, []string{"{t}", "{t}:rel"}, []string{"o", "r", "c", "1000"}).Error()
	if !lua.IsShebangError(err) {
		t.Fatalf("miniredis's refusal of the shebang not recognised: %v", err)
	}
	if lua.IsShebangError(errors.New("compile '#'")) {
		t.Fatal("a non-Redis error is not a shebang error")
	}
	if lua.IsShebangError(nil) {
		t.Fatal("nil is not a shebang error")
	}
}

// TestFenceTTL_matchesTheScripts: lua.FenceTTL and lua.CounterTTL are what lib_fence.lua sets.
func TestFenceTTL_matchesTheScripts(t *testing.T) {
	want := "local fenceTTL = " + strconv.FormatInt(lua.FenceTTL.Milliseconds(), 10) + "\n"
	for _, s := range []*lua.Script{lua.Acquire, lua.Release, lua.FairAcquire, lua.RWAcquire} {
		if !strings.Contains(s.Source(), want) {
			t.Errorf("%s: does not set the fence for lua.FenceTTL (%q)", s.Name(), want)
		}
	}
	want = "local counterTTL = " + strconv.FormatInt(lua.CounterTTL.Milliseconds(), 10) + "\n"
	for _, s := range []*lua.Script{lua.Acquire, lua.Release} {
		if !strings.Contains(s.Source(), want) {
			t.Errorf("%s: does not count for lua.CounterTTL (%q)", s.Name(), want)
		}
	}
}

// TestAcquire_fence: a fresh grant sets the fence (a string: the token) to live
// lua.FenceTTL; a re-entry answers the holder's token even when the fence is gone; tokens
// rise across a lost fence; a fence that holds something else than a token fails the
// acquire before anything is written.
func TestAcquire_fence(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		acquire := func(owner, req string) ([]int64, error) {
			return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{f}", "{f}:fence"}, []string{"10000", owner, req}).AsIntSlice()
		}
		release := func(owner, req string) {
			t.Helper()
			err := lua.Release.Lua(tc.flags).Exec(ctx, tc.c, []string{"{f}", "{f}:forced"}, []string{owner, req, "", ""}).Error()
			if err != nil {
				t.Fatal(err)
			}
		}
		v, err := acquire("h:a", "1")
		if err != nil || v[0] != 1 || v[2] != 1 {
			t.Fatalf("fresh grant: %v %v", v, err)
		}
		tok := v[1]
		if s, _ := do("GET", "{f}:fence").ToString(); s != strconv.FormatInt(tok, 10) {
			t.Fatalf("fence %q, want the token %d", s, tok)
		}
		if ttl, _ := do("PTTL", "{f}:fence").AsInt64(); ttl <= 0 || ttl > lua.FenceTTL.Milliseconds() {
			t.Fatalf("fence PTTL %d, want (0, %d]", ttl, lua.FenceTTL.Milliseconds())
		}
		do("DEL", "{f}:fence")
		if v, err := acquire("h:a", "2"); err != nil || v[0] != 1 || v[1] != tok || v[2] != 2 {
			t.Fatalf("re-entry without a fence: %v %v, want {1, %d, 2}", v, err, tok)
		}
		if v, err := acquire("h:a", "2"); err != nil || v[1] != tok || v[2] != 2 {
			t.Fatalf("replayed re-entry: %v %v", v, err)
		}
		release("h:a", "3")
		release("h:a", "4")
		do("DEL", "{f}:fence")
		v, err = acquire("h:b", "5")
		if err != nil || v[0] != 1 || v[1] <= tok {
			t.Fatalf("fresh grant after the fence was lost: %v %v, want a token above %d", v, err, tok)
		}
		release("h:b", "6")

		do("SET", "{f}:fence", "user data")
		if _, err := acquire("h:c", "7"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("a fence that is not a token: %v", err)
		}
		if n, _ := do("EXISTS", "{f}").AsInt64(); n != 0 {
			t.Fatal("the failed acquire wrote the lock")
		}
		if s, _ := do("GET", "{f}:fence").ToString(); s != "user data" {
			t.Fatalf("the fence was changed to %q", s)
		}
		do("DEL", "{f}:fence")
	})
}

// TestRelease_replayAnswers: release.lua keeps no record per request. A first send (” as
// ARGV[4]) that finds no hold answers -1; a replay (the tenure's token as ARGV[4]) answers -2
// (the caller decides by its clock) unless the forced record, which force_release.lua writes
// for every owner it takes the lock from, names that very tenure (-1). A refused waiting
// attempt marks the lock ('w'), a plain one does not.
func TestRelease_replayAnswers(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		keys := []string{"{r}", "{r}:forced"}
		acquire := func(owner, req, wait string) []int64 {
			t.Helper()
			v, err := lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{r}", "{r}:fence"}, []string{"10000", owner, req, wait}).AsIntSlice()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		release := func(owner, req, tenure string) int64 {
			t.Helper()
			n, err := lua.Release.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{owner, req, "P{r}:released", tenure}).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		hasMark := func() bool {
			n, _ := tc.c.Do(ctx, tc.c.B().Hexists().Key("{r}").Field("w").Build()).AsInt64()
			return n == 1
		}
		v := acquire("h:a", "a1", "")
		tok := strconv.FormatInt(v[1], 10)
		acquire("h:b", "b1", "") // a single attempt: no mark
		if hasMark() {
			t.Fatal("a single refused attempt marked the lock")
		}
		acquire("h:b", "b2", "1") // a waiter's refusal marks it
		if !hasMark() {
			t.Fatal("a waiter's refusal did not mark the lock")
		}
		if n := release("h:a", "a2", ""); n != 0 {
			t.Fatalf("final release: %d, want 0", n)
		}
		if n := release("h:a", "a2", tok); n != -2 {
			t.Fatalf("replay of the final release: %d, want -2", n)
		}
		if n := release("h:a", "a3", ""); n != -1 {
			t.Fatalf("a first send without a hold: %d, want -1", n)
		}

		// A force takes the lock from h:a: the replay of a release that never arrived
		// learns it from the forced record.
		v = acquire("h:a", "a4", "")
		tok = strconv.FormatInt(v[1], 10)
		freed, err := lua.ForceRelease.Lua(tc.flags).Exec(ctx, tc.c, keys, []string{"", "0", "60000"}).AsInt64()
		if err != nil || freed != 1 {
			t.Fatalf("force: %d %v", freed, err)
		}
		if got, _ := tc.c.Do(ctx, tc.c.B().Hget().Key("{r}:forced").Field("h:a").Build()).ToString(); got != tok {
			t.Fatalf("forced record of h:a: %q, want the tenure's token %s", got, tok)
		}
		if ttl, _ := tc.c.Do(ctx, tc.c.B().Pttl().Key("{r}:forced").Build()).AsInt64(); ttl <= 0 || ttl > 70000 {
			t.Fatalf("forced record pttl %d, want (0, 70000]", ttl)
		}
		if n := release("h:a", "a5", tok); n != -1 {
			t.Fatalf("replay after a force took the tenure: %d, want -1", n)
		}
		// A later tenure of the same owner is not the forced one.
		v = acquire("h:a", "a6", "")
		if n := release("h:a", "a7", ""); n != 0 {
			t.Fatalf("final release: %d, want 0", n)
		}
		if n := release("h:a", "a7", strconv.FormatInt(v[1], 10)); n != -2 {
			t.Fatalf("replay of a later tenure's release: %d, want -2", n)
		}
	})
}

// TestCommands: every command a script calls is named literally (so that Commands, and the
// ACL rule built from it, list them all), and the list holds what the scripts are known to
// call.
func TestCommands(t *testing.T) {
	literal := regexp.MustCompile(`redis\.p?call\(\s*'`)
	anyCall := regexp.MustCompile(`redis\.p?call\(`)
	for _, s := range lua.All() {
		if n, m := len(anyCall.FindAllString(s.Source(), -1)), len(literal.FindAllString(s.Source(), -1)); n != m {
			t.Errorf("%s: %d of %d redis.call/pcall do not name their command literally", s.Name(), n-m, n)
		}
	}
	got := strings.Join(lua.Commands(), " ")
	for _, want := range []string{"exists", "time", "set", "hset", "pexpire", "hmget", "del", "publish", "hgetall", "zadd"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("Commands() = %s: missing %s", got, want)
		}
	}
}

// server is one of the servers eachServer runs a test on: its client, and whether it takes
// the scripts' shebang flags.
type server struct {
	name  string
	c     rueidis.Client
	flags bool
}

// eachServer runs fn on a real redis-server (scripts with their shebang flags) and on
// miniredis (without), each as a subtest.
func eachServer(t *testing.T, fn func(t *testing.T, tc server)) {
	srv := redistest.Start(t)
	_, mini := redistest.Miniredis(t)
	for _, tc := range []server{{"redis", srv.Client(t), true}, {"miniredis", mini, false}} {
		t.Run(tc.name, func(t *testing.T) { fn(t, tc) })
	}
}

// TestAcquire_clockToken: a fresh grant with a clock token ('c', RedLock's instances), inline
// while the fence is absent or holds only a token and through lib_fence's grantToken
// otherwise, gives max(last token + 1, the server's clock in µs) and writes the fence for
// lua.FenceTTL; a fence with spent records keeps them (and refuses a spent number); a fence of
// another type, or a string that is not a fence value, fails the acquire, nothing written.
func TestAcquire_clockToken(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		ctx := context.Background()
		do := func(args ...string) rueidis.RedisResult {
			t.Helper()
			return tc.c.Do(ctx, tc.c.B().Arbitrary(args...).Build())
		}
		nowUs := func() int64 {
			t.Helper()
			v, err := do("TIME").AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			s, _ := strconv.ParseInt(v[0], 10, 64)
			us, _ := strconv.ParseInt(v[1], 10, 64)
			return s*1_000_000 + us
		}
		acquire := func(req string) ([]int64, error) {
			return lua.Acquire.Lua(tc.flags).Exec(ctx, tc.c, []string{"{c}", "{c}:fence"}, []string{"10000", "h:a", req, "", "c"}).AsIntSlice()
		}
		fresh := func(what, req string, lo int64) int64 {
			t.Helper()
			before := nowUs()
			v, err := acquire(req)
			after := nowUs()
			if err != nil || len(v) != 3 || v[0] != 1 || v[2] != 1 {
				t.Fatalf("%s: %v %v, want a fresh grant", what, v, err)
			}
			if v[1] < max(lo, before) || v[1] > max(lo, after) {
				t.Fatalf("%s: token %d, want max(%d, the clock in [%d, %d])", what, v[1], lo, before, after)
			}
			if ttl, _ := do("PTTL", "{c}:fence").AsInt64(); ttl <= lua.FenceTTL.Milliseconds()-10_000 || ttl > lua.FenceTTL.Milliseconds() {
				t.Fatalf("%s: fence PTTL %d, want about %d", what, ttl, lua.FenceTTL.Milliseconds())
			}
			do("DEL", "{c}")
			return v[1]
		}
		// Inline: no fence; a fence whose token is behind the clock; one ahead of it.
		tok := fresh("no fence", "c1.1", 0)
		if s, _ := do("GET", "{c}:fence").ToString(); s != strconv.FormatInt(tok, 10) {
			t.Fatalf("fence %q, want the token %d", s, tok)
		}
		do("SET", "{c}:fence", "12")
		fresh("a fence behind the clock", "c1.2", 0)
		ahead := nowUs() + 1_000_000_000
		do("SET", "{c}:fence", strconv.FormatInt(ahead, 10))
		if got := fresh("a fence ahead of the clock", "c1.3", ahead+1); got != ahead+1 {
			t.Fatalf("token %d, want %d", got, ahead+1)
		}
		// grantToken: a fence with a live spent record keeps it, and refuses the spent number.
		rec := "/c1.9/" + strconv.FormatInt(nowUs()/1000+60_000, 10)
		do("SET", "{c}:fence", "12"+rec)
		tok = fresh("a fence with a spent record", "c1.4", 13)
		if s, _ := do("GET", "{c}:fence").ToString(); s != strconv.FormatInt(tok, 10)+rec {
			t.Fatalf("fence %q, want the token then the record %q", s, rec)
		}
		if v, err := acquire("c1.9"); err != nil || len(v) != 2 || v[0] != 0 {
			t.Fatalf("a spent number: %v %v, want {0, 0}", v, err)
		}
		// Failures, nothing written.
		for _, bad := range []func(){
			func() { do("SET", "{c}:fence", "user data") },
			func() { do("RPUSH", "{c}:fence", "x") },
		} {
			do("DEL", "{c}:fence")
			bad()
			if _, err := acquire("c1.5"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("a fence that is not a fence value: %v, want WRONGTYPE", err)
			}
			if n, _ := do("EXISTS", "{c}").AsInt64(); n != 0 {
				t.Fatal("the failed acquire wrote the lock")
			}
		}
		do("DEL", "{c}:fence")
	})
}
