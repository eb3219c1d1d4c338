package lua_test

import (
	"context"
	"testing"

	"github.com/relock-go/relock/lua"
)

// TestLatchScripts_run runs each script against a real server (with its flags) and
// miniredis (without): set, a replayed count-down, count-down to zero, delete.
func TestLatchScripts_run(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
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
			{lua.LatchCountDown, "3", []string{"P{l}:released", "*", "10000"}, 1, "2 -> 1"},
			{lua.LatchCountDown, "3", []string{"P{l}:released", "*", "10000"}, 1, "a replay does not count again"},
			{lua.LatchCountDown, "4", []string{"P{l}:released", "*", "10000"}, 0, "1 -> 0: deleted"},
			{lua.LatchCountDown, "5", []string{"P{l}:released", "*", "10000"}, -1, "no latch"},
			{lua.LatchDelete, "6", []string{"P{l}:released", "*", "10000"}, 0, "no latch"},
			{lua.LatchSet, "7", []string{"1", "10000"}, 1, "set again"},
			{lua.LatchDelete, "8", []string{"P{l}:released", "*", "10000"}, 1, "deleted"},
			{lua.LatchDelete, "8", []string{"P{l}:released", "*", "10000"}, 1, "a replay answers as the first time"},
		} {
			if got := run(step.s, step.req, step.args...); got != step.want {
				t.Fatalf("%s req %s (%s): got %d, want %d", step.s.Name(), step.req, step.comment, got, step.want)
			}
		}
	})
}
