package rlock

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// runtimeErrClient answers every command of a DoMulti with re after sending it on for real
// (the script ran), and counts the commands sent.
type runtimeErrClient struct {
	rueidis.Client
	re    *rueidis.RedisError
	sends atomic.Int32
}

func (f *runtimeErrClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	f.sends.Add(int32(len(cmds)))
	res := f.Client.DoMulti(ctx, cmds...)
	for i := range res {
		res[i] = rueidis.NewErrorResult(f.re)
	}
	return res
}

// execMulti sends a script again without its shebang flags only when it was sent with them:
// miniredis words a script's runtime errors as compile errors ("Error compiling script (new
// function): ..."), so a script without flags that ran and failed with a message naming '#'
// looked refused, was run a second time, and turned the Client's flags off (helper
// mrcompile27's note). Renew has no flags; its error reply must come back as it is, after
// one send.
func TestExecMulti_refusalOfAScriptWithoutFlagsIsNotSentAgain(t *testing.T) {
	require.False(t, lua.Renew.HasFlags(), "the test needs a script without flags")
	_, rc := redistest.Miniredis(t)
	fake := &runtimeErrClient{Client: rc, re: redisError(t, "ERR Error compiling script (new function): user_script:3: attempt to index '#' value")}
	require.True(t, lua.IsShebangError(fake.re), "the reply must look like a refusal of the flags")
	c, err := New(fake)
	require.NoError(t, err)
	defer c.Close()
	require.True(t, c.flags.Load(), "a new Client sends flags until a server refuses them")
	res := c.execMulti(context.Background(), []scriptCall{{s: lua.Renew, keys: []string{"{x}"}, args: []string{"1000", "o"}}})
	require.Len(t, res, 1)
	require.Equal(t, fake.re, res[0].Error(), "the script's own error reply")
	require.Equal(t, int32(1), fake.sends.Load(), "a script without flags that ran is not sent again")
	require.True(t, c.flags.Load(), "the server refused no flags")
}
