package main

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestRelock_fastForm: a Mutex held in the fast form (docs/DESIGN.md section 5; written by
// hand: nothing writes it yet) is shown held by its owner, one hold, its token unknown and no
// since; force-unlock frees it only as shown (the owner's next fast tenure, begun between the
// read and the force, is left alone: exit 4); a ghost (its sequence number spent in the
// fence) is not held. Before, the holder was not shown ("holders 0") and a ghost read held.
func TestRelock_fastForm(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := "fast"
	key := c.Mutex(name).Key()
	owner := "h:" + c.ID() + ":1"
	write := func(seq string) {
		srv.Do(t, "HSET", key, "token", "~"+owner+" "+seq)
		srv.Do(t, "PEXPIRE", key, "10000")
	}

	write("7.3")
	out, errOut, code := relock(t, "", "inspect", "--url", url, name)
	require.Equal(t, exitOK, code, errOut)
	got := normalise(out)
	require.Contains(t, got, "token  unknown (a fast grant")
	require.Contains(t, got, "holders  1\n")
	require.Contains(t, got, "  h:<id>:<n>  -  1  <dur>  -  client <id> (no record: WithClientInfo)\n")

	testHookBeforeForce = func() { write("7.4") } // the owner's next fast tenure
	out, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, name)
	testHookBeforeForce = nil
	require.Equal(t, exitAborted, code, out+errOut)
	require.Contains(t, out+errOut, "changed hands")
	if msg := srv.Do(t, "EXISTS", key); func() int64 { n, _ := msg.AsInt64(); return n }() != 1 {
		t.Fatal("the fast tenure begun since was freed")
	}
	out, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, name)
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, normalise(out), "freed fast (mutex), held by:\n  h:<id>:<n>, 1 hold(s), lease <dur>: client <id> (no record: WithClientInfo)\n")

	// A ghost: not held.
	write("7.3")
	msg := srv.Do(t, "TIME")
	tm, err := msg.AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	srv.Do(t, "SET", key+":fence", fmt.Sprintf("1000/7.3/%d", sec*1000+60000), "PX", "60000")
	out, errOut, code = relock(t, "", "inspect", "--url", url, name)
	require.Equal(t, exitNothing, code, out+errOut)
	require.Contains(t, out, "holders           0")
	out, _, code = relock(t, "", "force-unlock", "--yes", "--url", url, name)
	require.Equal(t, exitNothing, code)
	require.Contains(t, out, "not held")
}

// TestRelock_fastString: a Mutex held in the fast form written as a string (the fast grant's
// SET: "~<owner> <seq>") is shown as the hash form is (its owner, one hold, token unknown)
// and force-unlock frees it as shown; a string ghost is not held. Before, the name was "not
// relock's: a string".
func TestRelock_fastString(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := "faststr"
	key := c.Mutex(name).Key()
	owner := "h:" + c.ID() + ":1"
	write := func(seq string) { srv.Do(t, "SET", key, "~"+owner+" "+seq, "PX", "30000") }

	write("c1.7")
	out, errOut, code := relock(t, "", "inspect", "--url", url, name)
	require.Equal(t, exitOK, code, out+errOut)
	got := normalise(out)
	require.Contains(t, got, "token  unknown (a fast grant")
	require.Contains(t, got, "holders  1\n")
	require.Contains(t, got, "  h:<id>:<n>  -  1  <dur>  -  client <id> (no record: WithClientInfo)\n")
	out, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, name)
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, normalise(out), "freed faststr (mutex), held by:\n  h:<id>:<n>, 1 hold(s), lease <dur>: client <id> (no record: WithClientInfo)\n")

	write("c1.7")
	msg := srv.Do(t, "TIME")
	tm, err := msg.AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	srv.Do(t, "SET", key+":fence", fmt.Sprintf("1000/c1.7/%d", sec*1000+60000), "PX", "60000")
	out, errOut, code = relock(t, "", "inspect", "--url", url, name)
	require.Equal(t, exitNothing, code, out+errOut)
	require.Contains(t, out, "holders           0")
}
