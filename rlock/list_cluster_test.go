package rlock_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestList_clusterOneWalkPerMaster: on a real 3-master, 3-replica Redis Cluster, List walks
// the keyspace of each master once (one SCAN from cursor 0 per master, its later calls
// following the cursor), never a replica's, and yields every name once. The calls are
// counted by the servers themselves: each node's slow log, set to record every command.
// The keyspace holds 6000 other keys, so that a master's walk takes several calls.
func TestList_clusterOneWalkPerMaster(t *testing.T) {
	skipShortCluster(t)
	t.Cleanup(redistest.WaitRueidisGoroutines)
	cl := startCluster(t)
	rc := cl.Client(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	base := redistest.Name(t)
	var names []string
	for i := range 30 {
		name := fmt.Sprintf("%s-%d", base, i)
		require.NoError(t, c.Mutex(name).Lock(bg))
		names = append(names, name)
	}
	var fill rueidis.Commands
	for i := range 6000 {
		fill = append(fill, rc.B().Set().Key(fmt.Sprintf("other:%d", i)).Value("x").Build())
	}
	for _, res := range rc.DoMulti(bg, fill...) {
		require.NoError(t, res.Error())
	}
	masters := map[string]bool{}
	for _, m := range cl.Masters(t) {
		masters[m.Addr()] = true
	}
	require.Len(t, masters, 3)
	for _, n := range cl.Nodes() {
		n.Do(t, "CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", "100000")
		n.Do(t, "SLOWLOG", "RESET")
	}

	var got []string
	for name, err := range c.List(bg, base+"-*") {
		require.NoError(t, err)
		got = append(got, name)
	}
	require.ElementsMatch(t, names, got, "every name, once")

	for _, n := range cl.Nodes() {
		log := n.Do(t, "SLOWLOG", "GET", "-1")
		entries, err := log.ToArray()
		require.NoError(t, err)
		walks, calls := 0, 0
		for _, e := range entries {
			f, err := e.ToArray()
			require.NoError(t, err)
			args, err := f[3].AsStrSlice()
			require.NoError(t, err)
			if !strings.EqualFold(args[0], "scan") {
				continue
			}
			calls++
			if args[1] == "0" {
				walks++
			}
		}
		n.Do(t, "CONFIG", "SET", "slowlog-log-slower-than", "10000")
		if masters[n.Addr()] {
			require.Equal(t, 1, walks, "master %s: walks of its keyspace (SCAN 0), in %d SCAN calls", n.Addr(), calls)
			require.Greater(t, calls, 1, "master %s: its walk took one call: the test's keyspace is too small to follow a cursor", n.Addr())
		} else {
			require.Zero(t, calls, "replica %s: SCAN calls", n.Addr())
		}
	}
}
