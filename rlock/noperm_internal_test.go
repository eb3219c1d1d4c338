package rlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// lineOf is the number of the first line of text that contains s (from 1).
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not found", s)
	return 0
}

// TestRefused: the command, and the script that called it, are found in each form of Redis's
// refusal.
func TestRefused(t *testing.T) {
	flagged := lua.Release.Source()
	sum := sha1.Sum([]byte(flagged))
	flaggedSHA := hex.EncodeToString(sum[:])
	plainSHA := lua.Release.PlainSHA1()
	const pexpire = "redis.pcall('pexpire', lock, nextLease)"
	fl, pl := lineOf(t, flagged, pexpire), lineOf(t, lua.Release.PlainSource(), pexpire)
	require.Equal(t, fl, pl+1, "the flagged form has the shebang line more")
	const userScript = "The user executing the script can't run this command or subcommand"
	for _, c := range []struct{ msg, want string }{
		// Redis 7.0, each form of the script: numbered as sent, shebang included.
		{fmt.Sprintf("ERR %s script: %s, on @user_script:%d.", userScript, flaggedSHA, fl), "release script's PEXPIRE"},
		{fmt.Sprintf("ERR %s script: %s, on @user_script:%d.", userScript, plainSHA, pl), "release script's PEXPIRE"},
		// The wrong line for the form: no command there.
		{fmt.Sprintf("ERR %s script: %s, on @user_script:%d.", userScript, plainSHA, fl), "release script's call"},
		// A key refused.
		{fmt.Sprintf("ERR The user executing the script can't access at least one of the keys mentioned in the command script: %s, on @user_script:%d.", plainSHA, pl), "release script's PEXPIRE"},
		// Redis 6.
		{fmt.Sprintf("ERR Error running script (call to f_%s): @user_script:%d: @user_script: %d: %s", plainSHA, pl, pl, userScript), "release script's PEXPIRE"},
		// A server that names the command (Redis 7.2).
		{fmt.Sprintf("NOPERM User u has no permissions to run the 'pexpire' command script: %s, on @user_script:%d.", plainSHA, pl), "release script's PEXPIRE"},
		{fmt.Sprintf("NOPERM User u has no permissions to run the 'pexpire' command script: %s, on @user_script:%d.", strings.Repeat("0", 40), pl), "PEXPIRE"},
		// A command sent alone.
		{"NOPERM this user has no permissions to run the 'pttl' command", "PTTL"},
		{"NOPERM this user has no permissions to run the 'cluster|slots' command or its subcommand", "CLUSTER|SLOTS"},
		// Nothing to name.
		{"NOPERM this user has no permissions to access one of the keys used as arguments", ""},
		{fmt.Sprintf("ERR %s script: %s, on @user_script:%d.", userScript, strings.Repeat("0", 40), pl), ""},
		{userScript, ""},
	} {
		require.Equal(t, c.want, refused(c.msg), c.msg)
	}
}

// redisError is msg as an error reply from a server.
func redisError(t *testing.T, msg string) *rueidis.RedisError {
	t.Helper()
	_, c := redistest.Miniredis(t)
	err := c.Do(context.Background(), c.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
	re, ok := rueidis.IsRedisErr(err)
	require.True(t, ok, "%v", err)
	return re
}

// TestNoPermissionError: the error names the operation, the lock, the script and the command,
// keeps Redis's message, and wraps ErrNoPermission; the renewal's refusal wraps Redis's
// error.
func TestNoPermissionError(t *testing.T) {
	line := lineOf(t, lua.Release.PlainSource(), "redis.pcall('pexpire', lock, nextLease)")
	msg := fmt.Sprintf("ERR The user executing the script can't run this command or subcommand script: %s, on @user_script:%d.", lua.Release.PlainSHA1(), line)
	re := redisError(t, msg)
	err := classify("unlock", "x", re)
	require.ErrorIs(t, err, ErrNoPermission)
	require.Equal(t, `rlock: unlock "x": no permission: release script's PEXPIRE refused (`+re.Error()+`)`, err.Error())

	err = refusal(re)
	require.Equal(t, `release script's PEXPIRE refused (`+re.Error()+`)`, err.Error())
	var got *rueidis.RedisError
	require.True(t, errors.As(err, &got))

	// Nothing to name: the message alone, as before.
	re = redisError(t, "NOPERM this user has no permissions to access one of the keys used as arguments")
	require.Equal(t, `rlock: ttl of "x": no permission (`+re.Error()+`)`, classify("ttl of", "x", re).Error())
	require.Equal(t, error(re), refusal(re))
}
