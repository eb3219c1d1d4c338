package lua_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

var latchScripts = []*lua.Script{lua.LatchSet, lua.LatchCountDown, lua.LatchDelete}

func TestLatchScripts_haveHeaders(t *testing.T) {
	for _, s := range latchScripts {
		src := s.Source()
		if !strings.Contains(src, "KEYS[2]") || !strings.Contains(src, "ARGV[") || !strings.Contains(src, "returns") {
			t.Errorf("%s: the header must name KEYS, ARGV and the replies", s.Name())
		}
	}
	if lua.LatchSet.HasFlags() {
		t.Error("latch_set creates data: it must not run on a full server")
	}
	if !lua.LatchCountDown.HasFlags() || !lua.LatchDelete.HasFlags() {
		t.Error("count-down and delete free waiters: they must run with allow-oom")
	}
}

// TestLatchScripts_run runs each script against a real server (with its flags) and
// miniredis (without): set, a replayed count-down, count-down to zero, delete.
func TestLatchScripts_run(t *testing.T) {
	srv := redistest.Start(t)
	_, mini := redistest.Miniredis(t)
	for _, tc := range []struct {
		name  string
		c     rueidis.Client
		flags bool
	}{{"redis", srv.Client(t), true}, {"miniredis", mini, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			run := func(s *lua.Script, req string, args ...string) int64 {
				t.Helper()
				n, err := s.Lua(tc.flags).Exec(ctx, tc.c, []string{"{l}", "{l}:req:" + req}, args).AsInt64()
				if err != nil {
					t.Fatalf("%s %s: %v", s.Name(), req, err)
				}
				return n
			}
			for _, step := range []struct {
				s       *lua.Script
				req     string
				args    []string
				want    int64
				comment string
			}{
				{lua.LatchSet, "1", []string{"2", "10000"}, 1, "created"},
				{lua.LatchSet, "1", []string{"2", "10000"}, 1, "a replay answers as the first time"},
				{lua.LatchSet, "2", []string{"5", "10000"}, 0, "exists"},
				{lua.LatchCountDown, "3", []string{"{l}:released", "*", "10000"}, 1, "2 -> 1"},
				{lua.LatchCountDown, "3", []string{"{l}:released", "*", "10000"}, 1, "a replay does not count again"},
				{lua.LatchCountDown, "4", []string{"{l}:released", "*", "10000"}, 0, "1 -> 0: deleted"},
				{lua.LatchCountDown, "5", []string{"{l}:released", "*", "10000"}, -1, "no latch"},
				{lua.LatchDelete, "6", []string{"{l}:released", "*", "10000"}, 0, "no latch"},
				{lua.LatchSet, "7", []string{"1", "10000"}, 1, "set again"},
				{lua.LatchDelete, "8", []string{"{l}:released", "*", "10000"}, 1, "deleted"},
				{lua.LatchDelete, "8", []string{"{l}:released", "*", "10000"}, 1, "a replay answers as the first time"},
			} {
				if got := run(step.s, step.req, step.args...); got != step.want {
					t.Fatalf("%s req %s (%s): got %d, want %d", step.s.Name(), step.req, step.comment, got, step.want)
				}
			}
		})
	}
}
