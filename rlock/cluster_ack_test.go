package rlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The tests of this file check WithReplicaAck on a real Redis Cluster (3 masters, 3
// replicas): the acknowledgement of a grant must come from the replicas of the master that
// applied it. rueidis follows a MOVED or an ASK by sending the redirected command alone to the
// node named; a keyless WAIT sent with it stays on the first node and counts that node's
// replicas. In each test the target master's replica is stopped (SIGSTOP), so that it cannot
// acknowledge anything, while the source master's replica can: a grant on the target must be
// reported unacknowledged (ErrNoReplicaAck) and given back. Before the fix, each of them got
// the grant with the source's acknowledgement.

// clusterAckTimeout is the WAIT timeout of the tests: how long an unacknowledged grant takes.
const clusterAckTimeout = 200 * time.Millisecond

// ackSetup is the common part of the tests: a cluster, a Client with WithReplicaAck(1), a
// lock, the master serving its slot (src), another master (dst) and dst's replica.
type ackSetup struct {
	cl       *redistest.Cluster
	c        *rlock.Client
	m        *rlock.Mutex
	slot     int
	src, dst *redistest.Server
	replica  *redistest.Server // dst's
}

func newAckSetup(t *testing.T, wrap func(rueidis.Client) rueidis.Client) *ackSetup {
	t.Helper()
	return newAckSetupTimeout(t, wrap, clusterAckTimeout)
}

// newAckSetupTimeout is newAckSetup with the WAIT timeout ack.
func newAckSetupTimeout(t *testing.T, wrap func(rueidis.Client) rueidis.Client, ack time.Duration) *ackSetup {
	t.Helper()
	cl := startCluster(t)
	rc := cl.Client(t)
	if wrap != nil {
		rc = wrap(rc)
	}
	t.Cleanup(redistest.WaitRueidisGoroutines) // after the Client's Close, before rc's
	c, err := rlock.New(rc, rlock.WithReplicaAck(1, ack))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s := &ackSetup{cl: cl, c: c, m: c.Mutex(redistest.Name(t))}
	s.slot = redistest.Slot(s.m.Key())
	s.src = cl.MasterOf(t, s.m.Key())
	s.dst = otherMaster(t, cl, s.src)
	s.replica = cl.ReplicaOf(t, s.dst)
	return s
}

// onDst reports whether dst has the lock's key.
func (s *ackSetup) onDst(t *testing.T) bool {
	t.Helper()
	msg := s.dst.Do(t, "EXISTS", s.m.Key())
	n, err := msg.AsInt64()
	require.NoError(t, err)
	return n == 1
}

// setSlotNode assigns the slot to dst on dst and on src (CLUSTER SETSLOT NODE, as the end of a
// migration does), without waiting for the other nodes: Migration.Finish asks every node,
// and dst's replica is stopped.
func (s *ackSetup) setSlotNode(t *testing.T) {
	t.Helper()
	for _, n := range []*redistest.Server{s.dst, s.src} {
		msg := n.Do(t, "CLUSTER", "SETSLOT", strconv.Itoa(s.slot), "NODE", s.cl.NodeID(s.dst))
		require.NoError(t, msg.Error())
	}
}

// errorCount returns how many error replies s sent that begin with code (INFO errorstats).
func errorCount(t *testing.T, s *redistest.Server, code string) int64 {
	t.Helper()
	msg := s.Do(t, "INFO", "errorstats")
	text, err := msg.ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimPrefix(text, "txt:"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+code+":count="); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// A Client whose slot map is stale (the slot moved after it learned the map) sends the grant
// to the old master, which answers MOVED: the grant is applied on the new master, whose
// replica is stopped. The WAIT must be the new master's: the grant is reported
// unacknowledged and given back. Before, the grant was re-sent alone and the WAIT answered
// by the old master, whose replica had nothing to acknowledge: TryLock returned true.
func TestClusterAck_movedGrantIsAckedByTheNewMaster(t *testing.T) {
	skipShortCluster(t)
	s := newAckSetup(t, nil)
	s.cl.MigrateSlot(t, s.slot, s.dst) // the Client's slot map still says src
	moved := errorCount(t, s.src, "MOVED")
	s.replica.Pause(t)

	ok, err := s.m.TryLock(bg, 0, 10*time.Second)
	require.False(t, ok, "a grant that dst's replica could not acknowledge was reported acknowledged")
	require.ErrorIs(t, err, rlock.ErrNoReplicaAck)
	redistest.WaitFor(t, 10*time.Second, "the unacknowledged grant to be given back", func() bool { return !s.onDst(t) })
	require.Greater(t, errorCount(t, s.src, "MOVED"), moved, "the grant went to src first (stale slot map), which redirected it")

	// Within a wait the attempt is retried, and given back each time.
	ok, err = s.m.TryLock(bg, 3*clusterAckTimeout, 10*time.Second)
	require.False(t, ok)
	require.ErrorIs(t, err, rlock.ErrNoReplicaAck)
	redistest.WaitFor(t, 10*time.Second, "the unacknowledged grant to be given back", func() bool { return !s.onDst(t) })

	// Once dst's replica is back, the grant is acknowledged by it.
	s.replica.Resume(t)
	ok, err = s.m.TryLock(bg, 10*time.Second, 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, s.onDst(t))
	require.NoError(t, s.m.Unlock(bg))
}

// A Client whose slot map is stale still gets a grant at the first attempt when the new
// master's replica acknowledges: following the redirect keeps a single attempt (wait 0)
// working.
func TestClusterAck_movedGrantSucceedsAtOnce(t *testing.T) {
	skipShortCluster(t)
	// Every replica runs here, and the single attempt must be acknowledged: the WAIT timeout
	// bounds only how long a loaded machine may take to acknowledge (200ms was not always
	// enough: "0 of 1 acknowledged"). A healthy WAIT returns at the acknowledgement.
	s := newAckSetupTimeout(t, nil, 10*time.Second)
	s.cl.MigrateSlot(t, s.slot, s.dst)
	moved := errorCount(t, s.src, "MOVED")
	ok, err := s.m.TryLock(bg, 0, 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, s.onDst(t))
	require.Greater(t, errorCount(t, s.src, "MOVED"), moved, "the grant went to src first (stale slot map)")
	require.NoError(t, s.m.Unlock(bg))
	require.False(t, s.onDst(t))
}

// While the slot migrates, a fresh grant is redirected by src with ASK, and dst cannot serve
// it yet (TRYAGAIN: the lock's keys are not all there). The slot is then handed to dst while
// the attempt goes on: the grant is applied on dst, whose replica is stopped. Before, rueidis
// retried the script alone within the same request and the WAIT stayed answered by src:
// TryLock returned true.
func TestClusterAck_grantDuringMigrationIsAckedByTheNodeThatAppliedIt(t *testing.T) {
	skipShortCluster(t)
	s := newAckSetup(t, nil)
	mig := s.cl.BeginMigration(t, s.slot, s.dst)
	s.replica.Pause(t)
	asking := s.dst.CommandStats(t)["asking"]

	type result struct {
		ok  bool
		err error
	}
	got := make(chan result, 1)
	go func() {
		ok, err := s.m.TryLock(bg, 3*time.Second, 10*time.Second)
		got <- result{ok, err}
	}()
	redistest.WaitFor(t, 10*time.Second, "the grant to be redirected to dst with ASK", func() bool {
		return s.dst.CommandStats(t)["asking"] > asking
	})
	s.setSlotNode(t)

	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("TryLock did not return")
	}
	require.False(t, r.ok, "a grant that dst's replica could not acknowledge was reported acknowledged")
	require.ErrorIs(t, r.err, rlock.ErrNoReplicaAck)
	redistest.WaitFor(t, 10*time.Second, "the unacknowledged grant to be given back", func() bool { return !s.onDst(t) })

	s.replica.Resume(t)
	mig.Finish(t)
	ok, err := s.m.TryLock(bg, 10*time.Second, 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.m.Unlock(bg))
}

// replyLosingClient loses the reply of the first acquire that granted (sent with its WAIT,
// through DoMulti or a dedicated client): the script ran, lost() runs, and the caller gets the
// error of a request that timed out. relock then replays the acquire and, learning that it
// granted, waits for the acknowledgements after touching the lock's lease (ackAfterTouch).
//
// It is the one wrapper of these tests that is not a hookClient hook (issue 24), for two
// reasons: the script and its WAIT must reach Redis as one pipeline on one connection (WAIT
// counts the acknowledgements of its own connection's writes), and hookClient, once its
// hook is set, sends a pipeline holding a script as one Do per command; and on a Cluster
// relock sends them through a Dedicated connection, which hookClient does not wrap.
type replyLosingClient struct {
	rueidis.Client
	armed atomic.Bool
	lost  func()
}

// isAcquire reports whether multi is a script sent with its WAIT (to be told before the
// send: rueidis recycles the commands it sent).
func isAcquire(multi []rueidis.Completed) bool { return len(multi) >= 2 && isRelockScript(multi[0]) }

func (l *replyLosingClient) lose(res []rueidis.RedisResult) []rueidis.RedisResult {
	if vals, err := res[0].AsIntSlice(); err != nil || len(vals) != 3 || vals[0] != 1 || !l.armed.CompareAndSwap(true, false) {
		return res
	}
	l.lost()
	for i := range res {
		res[i] = rueidis.NewErrorResult(context.DeadlineExceeded)
	}
	return res
}

func (l *replyLosingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if !isAcquire(multi) {
		return l.Client.DoMulti(ctx, multi...)
	}
	return l.lose(l.Client.DoMulti(ctx, multi...))
}

func (l *replyLosingClient) Dedicate() (rueidis.DedicatedClient, func()) {
	d, release := l.Client.Dedicate()
	return losingDedicated{DedicatedClient: d, l: l}, release
}

func (l *replyLosingClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return l.Client.Dedicated(func(d rueidis.DedicatedClient) error {
		return fn(losingDedicated{DedicatedClient: d, l: l})
	})
}

type losingDedicated struct {
	rueidis.DedicatedClient
	l *replyLosingClient
}

func (d losingDedicated) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if !isAcquire(multi) {
		return d.DedicatedClient.DoMulti(ctx, multi...)
	}
	return d.l.lose(d.DedicatedClient.DoMulti(ctx, multi...))
}

// The reply of a grant is lost, and before relock learns by a replay that it had granted,
// the slot moves to dst (with the lock's keys) and dst's replica stops. The WAIT after the
// lease touch must be dst's: the grant is reported unacknowledged and given back. Before,
// the touch was redirected (MOVED) alone and src answered the WAIT.
func TestClusterAck_replayedGrantAfterMoveIsAckedByTheNewMaster(t *testing.T) {
	skipShortCluster(t)
	var lc *replyLosingClient
	s := newAckSetup(t, func(rc rueidis.Client) rueidis.Client {
		lc = &replyLosingClient{Client: rc}
		return lc
	})
	lc.lost = func() {
		s.cl.MigrateSlot(t, s.slot, s.dst)
		s.replica.Pause(t)
	}
	lc.armed.Store(true)
	ok, err := s.m.TryLock(bg, 0, 10*time.Second)
	require.False(t, lc.armed.Load(), "the grant's reply was lost")
	require.False(t, ok, "a grant that dst's replica could not acknowledge was reported acknowledged")
	require.ErrorIs(t, err, rlock.ErrNoReplicaAck)
	redistest.WaitFor(t, 10*time.Second, "the unacknowledged grant to be given back", func() bool { return !s.onDst(t) })
	s.replica.Resume(t)
}

// As above, the slot migrating instead: the lock's keys are moved to dst before the replay,
// which src redirects with ASK and dst serves; so is the lease touch, whose WAIT must be
// dst's. Before, src answered it.
func TestClusterAck_replayedGrantDuringMigrationIsAckedByTheTarget(t *testing.T) {
	skipShortCluster(t)
	var lc *replyLosingClient
	s := newAckSetup(t, func(rc rueidis.Client) rueidis.Client {
		lc = &replyLosingClient{Client: rc}
		return lc
	})
	var mig *redistest.Migration
	lc.lost = func() {
		mig = s.cl.BeginMigration(t, s.slot, s.dst)
		mig.MoveKeys(t) // the lock and its fence, granted on src
		s.replica.Pause(t)
	}
	lc.armed.Store(true)
	asking := s.dst.CommandStats(t)["asking"]
	// The give-back cannot be served while the slot migrates (the release script's keys are
	// not all on dst: TRYAGAIN); it is tried within the cleanup timeout, and then the lock
	// expires with its lease.
	ok, err := s.m.TryLock(bg, 0, 4*time.Second)
	require.False(t, lc.armed.Load(), "the grant's reply was lost")
	require.False(t, ok, "a grant that dst's replica could not acknowledge was reported acknowledged")
	require.ErrorIs(t, err, rlock.ErrNoReplicaAck)
	require.Greater(t, s.dst.CommandStats(t)["asking"], asking, "the replay was redirected to dst with ASK")
	s.replica.Resume(t)
	mig.Finish(t)
	// The give-back failed within the cleanup timeout or went through; either way the lock is
	// free once its lease ran out at the latest.
	redistest.WaitFor(t, 20*time.Second, "the unacknowledged grant to be gone", func() bool { return !s.onDst(t) })
}
