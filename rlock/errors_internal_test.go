package rlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// redisErr returns the error reply msg as rueidis reports it, from a real server's script.
func redisErr(t *testing.T, srv *redistest.Server, msg string) error {
	t.Helper()
	c := srv.Client(t)
	err := c.Do(context.Background(), c.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
	_, ok := rueidis.IsRedisErr(err)
	require.True(t, ok, "%v is an error reply", err)
	return err
}

// definitive: which failures prove that a request changed nothing.
func TestDefinitive(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redisErr(t, srv, "WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{redisErr(t, srv, "TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisErr(t, srv, "Script attempted to access a non local key in a cluster node script: abc, on @user_script:161."), false},
		{fmt.Errorf("rlock: unlock %q: %w", "x", redisErr(t, srv, "Script attempted to access a non local key in a cluster node")), false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("%w: lost", ErrUnknownOutcome), false},
	} {
		require.Equal(t, tc.want, definitive(tc.err), "%v", tc.err)
	}
}
