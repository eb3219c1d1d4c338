package rlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// startOneNodeCluster starts a Redis Cluster of one master that serves every slot. Such a
// node has never been told its own address by a peer, so CLUSTER SLOTS and CLUSTER SHARDS
// give its host as "" (clients take the address they asked).
func startOneNodeCluster(t *testing.T) (*redistest.Server, rueidis.Client) {
	t.Helper()
	t.Cleanup(redistest.WaitRueidisGoroutines)
	srv := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	msg := srv.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	require.NoError(t, msg.Error())
	deadline := time.Now().Add(20 * time.Second)
	for {
		msg := srv.Do(t, "CLUSTER", "INFO")
		info, _ := msg.ToString()
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		require.True(t, time.Now().Before(deadline), "the one-node cluster never became ok: %s", info)
		time.Sleep(10 * time.Millisecond)
	}
	msg = srv.Do(t, "CLUSTER", "SLOTS")
	slots, err := msg.ToArray()
	require.NoError(t, err)
	require.Len(t, slots, 1)
	master, err := slots[0].ToArray()
	require.NoError(t, err)
	node, err := master[2].ToArray()
	require.NoError(t, err)
	host, _ := node[0].ToString()
	require.Empty(t, host, "the premise: the node does not know its own address")
	rc := srv.Client(t, func(o *rueidis.ClientOption) { o.ForceSingleClient = false })
	require.Equal(t, rueidis.ClientModeCluster, rc.Mode())
	return srv, rc
}

// TestReview27_listOneNodeCluster: List walks a Cluster whose CLUSTER SLOTS gives a master's
// host as "" (a node that does not know its own address, as the only node of a cluster), as
// rueidis does: the address of the node that answered. Before, List failed with "master :port
// of the cluster is not among the client's nodes (its slot map is being refreshed: try
// again)", every time, and `relock list` with it (exit 1), while Inspect worked.
func TestReview27_listOneNodeCluster(t *testing.T) {
	_, rc := startOneNodeCluster(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("one-node")
	require.NoError(t, m.Lock(bg))
	defer m.Unlock(bg)
	var names []string
	for name, err := range c.List(bg, "") {
		require.NoError(t, err)
		names = append(names, name)
	}
	require.Equal(t, []string{"one-node"}, names)
}

// TestReview27_inspectForeignHashHasNoKind: Inspect of a name whose key is a hash that no
// relock primitive makes returns ErrWrongType with an Info whose Kind is empty (Name, Key and
// Type set), as for a list or a string that is not a count. Before, Kind was KindMutex (set
// before the hash's fields were found not to be a lock's), so `relock list`, which shows the
// names Inspect refuses with ErrWrongType for what they are, listed it as a mutex.
func TestReview27_inspectForeignHashHasNoKind(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	key := c.Mutex("foreign").Key()
	msg := srv.Do(t, "HSET", key, "colour", "blue")
	require.NoError(t, msg.Error())
	in, err := c.Inspect(bg, "foreign")
	require.ErrorIs(t, err, rlock.ErrWrongType)
	require.Equal(t, rlock.Kind(""), in.Kind)
	require.Equal(t, "hash", in.Type)
	require.Equal(t, key, in.Key)
	require.Empty(t, in.Holders)
}
