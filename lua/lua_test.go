package lua_test

import (
	"context"
	"errors"
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
	lua.Release: true, lua.FairRelease: true, lua.FairLeave: true,
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
	srv := redistest.Start(t)
	_, mini := redistest.Miniredis(t)
	for _, tc := range []struct {
		name  string
		c     rueidis.Client
		flags bool
	}{{"redis", srv.Client(t), true}, {"miniredis", mini, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			runs := map[*lua.Script][2][]string{
				lua.Acquire:      {{"{t}", "{t}:fence"}, {"1000", "o", "r1"}},
				lua.Release:      {{"{t}", "{t}:rel"}, {"o", "r2", "{t}:released", "10000"}},
				lua.Renew:        {{"{t}"}, {"1000", "o"}},
				lua.ForceRelease: {{"{t}"}, {"{t}:released"}},
			}
			for _, s := range core {
				r := runs[s]
				if err := s.Lua(tc.flags).Exec(ctx, tc.c, r[0], r[1]).Error(); err != nil {
					t.Errorf("%s: %v", s.Name(), err)
				}
			}
		})
	}
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
