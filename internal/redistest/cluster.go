package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/hashslot"
)

const (
	// SlotCount is the number of hash slots of a Redis Cluster.
	SlotCount = hashslot.Count

	// clusterNodeTimeout is the --cluster-node-timeout of every node, in milliseconds: a
	// master that does not answer for this long is flagged PFAIL, then FAIL, and its
	// replica is promoted about a second later.
	clusterNodeTimeout = "2000"
	// clusterSettleTimeout bounds every wait for the cluster to agree on a new state.
	clusterSettleTimeout = 30 * time.Second
	// createTimeout bounds redis-cli --cluster create.
	createTimeout = 60 * time.Second
	// manualFailoverRetry is how long Failover waits before sending CLUSTER FAILOVER
	// again; Redis 7.0 gives up a manual failover after 5 s.
	manualFailoverRetry = 8 * time.Second
	// migrateBatch is how many keys MoveKeys fetches with CLUSTER GETKEYSINSLOT at a time.
	migrateBatch = 1000
	// clusterPoll is the polling period of the cluster waits: each poll asks every node
	// three questions.
	clusterPoll = 10 * time.Millisecond
	// delayedCloseWait bounds how long a Client's cleanup waits for rueidis to close the
	// connections a topology refresh dropped, which it does 5 s after the refresh.
	delayedCloseWait = 7 * time.Second
)

// Cluster is a Redis Cluster of three masters with one replica each, started by
// [StartCluster]. Its nodes are ordinary [Server] values, so the fault injection of
// [Server] (Kill, Stop, Pause, ...) applies to them; the methods of Cluster wait for the
// cluster to settle after the operations that change its topology.
type Cluster struct {
	nodes     []*Server
	ids       map[*Server]string // node IDs; they survive Restart (nodes.conf)
	byID      map[string]*Server
	password  string
	createOut string // redis-cli --cluster create's output, for failure messages
}

// StartCluster starts six redis-server processes with [Start] (each with
// --cluster-enabled yes, --cluster-config-file nodes.conf in its own data dir,
// --cluster-node-timeout 2000 and opts), joins them into a cluster of three masters
// and three replicas with redis-cli --cluster create ... --cluster-replicas 1, and waits
// until every node reports cluster_state:ok, all nodes agree on the roles and on the
// owner of each of the 16384 slots, every master has a replica and every replica's
// link to its master is up (INFO replication master_link_status:up). It fails tb with
// the redis-cli output if that does not happen within 30 s. It takes 2 to 3 s here, 2 of
// them in redis-cli, which sleeps while the nodes meet.
//
// opts apply to every node. WithAOF and WithArgs work as for Start; WithPassword also
// sets --masterauth, authenticates redis-cli, MIGRATE and Client. WithTLS, WithReplicaOf
// and WithSentinel are refused. The servers are killed in tb.Cleanup as any server
// started by Start. When redis-cli is not on PATH it skips tb, or fails it if the
// environment variable CI is non-empty.
//
// A cluster node's bus port is its port + 10000. A node whose bus port falls in the
// kernel's ephemeral port range is killed and another started on a new port, so that no
// outgoing connection can hold the bus port when the node is restarted.
func StartCluster(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redistest: redis-cli binary not found on PATH (%v); CI is set, so this test must not be skipped: install redis-tools (Redis 7)", err)
		}
		tb.Skipf("redistest: skipping: redis-cli binary not found on PATH (%v); install Redis 7 to run this test", err)
		return nil
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.tls != nil:
		tb.Fatalf("redistest: StartCluster: WithTLS is not supported")
	case cfg.replicaOf != nil:
		tb.Fatalf("redistest: StartCluster: WithReplicaOf is not supported (the cluster chooses the replicas)")
	case cfg.sentinel != "":
		tb.Fatalf("redistest: StartCluster: WithSentinel is not supported")
	}
	args := []string{
		"--cluster-enabled", "yes",
		// Relative to --dir, which redis-server chdirs to: each node has its own.
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", clusterNodeTimeout,
	}
	if cfg.password != "" {
		args = append(args, "--masterauth", cfg.password)
	}
	nodeOpts := append([]Option{WithArgs(args...)}, opts...)

	c := &Cluster{
		ids:      make(map[*Server]string),
		byID:     make(map[string]*Server),
		password: cfg.password,
	}
	ephemeral := ephemeralLow()
	for len(c.nodes) < 6 {
		var s *Server
		for attempt := 0; ; attempt++ {
			s = Start(tb, nodeOpts...)
			if s.Port()+10000 < ephemeral || attempt == 20 {
				break
			}
			s.Kill(tb) // its cleanup removes it
		}
		msg := s.Do(tb, "CLUSTER", "MYID")
		id, err := msg.ToString()
		if err != nil || id == "" {
			tb.Fatalf("redistest: %s: CLUSTER MYID: %q, %v", s.Addr(), id, err)
		}
		c.nodes = append(c.nodes, s)
		c.ids[s] = id
		c.byID[id] = s
	}

	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	cmdArgs := append([]string{"--cluster", "create"}, c.Addrs()...)
	cmdArgs = append(cmdArgs, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, cmdArgs...)
	cmd.Env = os.Environ()
	if c.password != "" {
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+c.password)
	}
	out, err := cmd.CombinedOutput()
	c.createOut = ansiEscape.ReplaceAllString(string(out), "")
	// redis-cli's exit status is not enough (it exits 0 after some error replies): its
	// output must say that all went well.
	if err != nil || strings.Contains(c.createOut, "[ERR]") || !strings.Contains(c.createOut, "[OK] All 16384 slots covered") {
		tb.Fatalf("redistest: redis-cli %s: %v\n--- output ---\n%s", strings.Join(cmdArgs, " "), err, c.createOut)
	}
	c.waitSettled(tb, "the cluster to form", nil, nil)
	return c
}

// ansiEscape matches the colour codes of redis-cli's output.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// Nodes returns the six nodes in the order they were started (the first three were made
// masters by redis-cli, but roles change with failovers: see Masters).
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns the addresses of the nodes, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// NodeID returns the cluster node ID of s (CLUSTER MYID), or "" if s is not a node of c.
func (c *Cluster) NodeID(s *Server) string { return c.ids[s] }

// Masters returns the masters that serve slots now, as the first running node sees
// them (CLUSTER NODES), ordered by their lowest slot. It takes tb because it asks the
// cluster, and fails tb if no node is running.
func (c *Cluster) Masters(tb testing.TB) []*Server {
	tb.Helper()
	v := c.mustView(tb)
	type owner struct {
		s    *Server
		slot int
	}
	var ms []owner
	for _, n := range v.nodes {
		if n.master && !n.fail && len(n.slots) > 0 {
			ms = append(ms, owner{c.byID[n.id], n.slots[0][0]})
		}
	}
	slices.SortFunc(ms, func(a, b owner) int { return a.slot - b.slot })
	out := make([]*Server, len(ms))
	for i, m := range ms {
		out[i] = m.s
	}
	return out
}

// MasterOf returns the master serving key's slot now (CLUSTER KEYSLOT, then the first
// running node's CLUSTER NODES). During a migration that is still the source.
func (c *Cluster) MasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	n := c.liveNode(tb)
	msg := n.Do(tb, "CLUSTER", "KEYSLOT", key)
	slot, err := msg.AsInt64()
	if err != nil {
		tb.Fatalf("redistest: %s: CLUSTER KEYSLOT %q: %v", n.Addr(), key, err)
	}
	return c.ownerOf(tb, int(slot))
}

// ReplicaOf returns a running replica of master, as the first running node sees the
// cluster; it fails tb if master has none.
func (c *Cluster) ReplicaOf(tb testing.TB, master *Server) *Server {
	tb.Helper()
	id := c.mustID(tb, master)
	v := c.mustView(tb)
	for _, s := range c.nodes {
		if n := v.byID[c.ids[s]]; n != nil && !n.master && n.masterID == id && !n.fail && s.Running() {
			return s
		}
	}
	tb.Fatalf("redistest: %s has no running replica\n%s", master.Addr(), v.text)
	return nil
}

// Client returns a rueidis cluster client (Mode() == rueidis.ClientModeCluster) with
// InitAddress set to the first running node and Password set for a cluster started
// WithPassword; opts may change any field. One address is enough: rueidis learns the
// other nodes from CLUSTER SLOTS and refreshes the topology from every node it knows.
// With several, NewClient's first topology refresh races with its parallel dials (in 3
// runs out of 5 here) and drops connections that rueidis closes 5 s later in a goroutine
// of its own. The client is closed in tb.Cleanup, after paused nodes are resumed
// (rueidis' Close waits for PING replies); the cleanup then waits, up to 7 s, for any
// such delayed close (a killed master's connection is dropped so too), so that goleak
// finds no goroutine left behind.
func (c *Cluster) Client(tb testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	addrs := []string{c.liveNode(tb).Addr()}
	o := rueidis.ClientOption{InitAddress: addrs, Password: c.password}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	rc, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatalf("redistest: new rueidis cluster client to %v: %v", o.InitAddress, err)
	}
	if m := rc.Mode(); m != rueidis.ClientModeCluster {
		rc.Close()
		tb.Fatalf("redistest: rueidis client to %v is in mode %v, not ClientModeCluster (ForceSingleClient set?)", o.InitAddress, m)
	}
	tb.Cleanup(func() {
		for _, s := range c.nodes {
			s.resumeIfPaused(tb)
		}
		rc.Close()
		WaitRueidisGoroutines()
	})
	return rc
}

// WaitRueidisGoroutines waits, up to 7 s, until no goroutine of this process is in one of
// the functions in which rueidis (v1.0.79) goes on working after a client's Close, so that
// goleak finds nothing after the test:
//   - the closing of the connections that a cluster topology refresh dropped (cluster.go): it
//     sleeps 5 s first. Connections are dropped when a node leaves the topology (a killed
//     master) and, at random, at the first refresh after NewClient with several
//     InitAddress: NewClient dials them all in parallel, returns after the first, and the
//     refresh replaces the connections the others add meanwhile;
//   - a delayed topology refresh (lazyRefresh, after an error such as a refused dial, a
//     MOVED or an ASK), whose goroutine sleeps up to a second;
//   - a NewClient still dialling or handshaking (one a test gave up on).
func WaitRueidisGoroutines() {
	deadline := time.Now().Add(delayedCloseWait)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		st := buf[:n]
		if !bytes.Contains(st, []byte("rueidis.(*clusterClient)._refresh.func")) &&
			!bytes.Contains(st, []byte("rueidis.(*call).DelayDo.func")) &&
			!bytes.Contains(st, []byte("rueidis.NewClient(")) || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Slot returns key's hash slot as Redis Cluster computes it: CRC16 (XMODEM) modulo 16384
// of the key, or of its hash tag, the part between the first '{' and the first '}' after
// it, when that part is not empty.
func Slot(key string) int { return int(hashslot.Of(key)) }

// Migration is a slot migration begun by [Cluster.BeginMigration]: the slot is
// IMPORTING on the target and MIGRATING on the source until Finish. Meanwhile a key
// still on the source is served there, a key already moved (or a new one) is
// redirected to the target with -ASK, and a command on several keys of the slot that
// are not all on one side gets -TRYAGAIN. rueidis follows ASK, but retries TRYAGAIN
// until the context's deadline (or, with DisableRetry, returns it at once).
type Migration struct {
	c        *Cluster
	slot     int
	src, dst *Server
	finished bool
}

// BeginMigration starts moving slot from its current master to the master to: it sends
// CLUSTER SETSLOT slot IMPORTING <source id> to the target, then CLUSTER SETSLOT slot
// MIGRATING <target id> to the source. No key moves until MoveKeys or Finish.
func (c *Cluster) BeginMigration(tb testing.TB, slot int, to *Server) *Migration {
	tb.Helper()
	if slot < 0 || slot >= SlotCount {
		tb.Fatalf("redistest: BeginMigration: slot %d out of range", slot)
	}
	dstID := c.mustID(tb, to)
	v := c.mustView(tb)
	if n := v.byID[dstID]; n == nil || !n.master || n.fail {
		tb.Fatalf("redistest: BeginMigration: target %s is not a live master\n%s", to.Addr(), v.text)
	}
	src := c.ownerOf(tb, slot)
	if src == to {
		tb.Fatalf("redistest: BeginMigration: slot %d is already served by %s", slot, to.Addr())
	}
	s := strconv.Itoa(slot)
	c.mustOK(tb, to, "CLUSTER", "SETSLOT", s, "IMPORTING", c.ids[src])
	c.mustOK(tb, src, "CLUSTER", "SETSLOT", s, "MIGRATING", dstID)
	return &Migration{c: c, slot: slot, src: src, dst: to}
}

// Slot returns the slot being migrated.
func (m *Migration) Slot() int { return m.slot }

// Source returns the master the slot is moved from.
func (m *Migration) Source() *Server { return m.src }

// Target returns the master the slot is moved to.
func (m *Migration) Target() *Server { return m.dst }

// MoveKeys moves the given keys of the slot from the source to the target with MIGRATE
// (keys the source does not hold are skipped), or, when no key is given, every key the
// source still holds in the slot (CLUSTER GETKEYSINSLOT). It fails tb if a key is not in
// the slot or MIGRATE returns an error (e.g. BUSYKEY: the target already has the key).
func (m *Migration) MoveKeys(tb testing.TB, keys ...string) {
	tb.Helper()
	if m.finished {
		tb.Fatalf("redistest: MoveKeys after Finish")
	}
	if len(keys) > 0 {
		for _, k := range keys {
			if Slot(k) != m.slot {
				tb.Fatalf("redistest: MoveKeys: key %q is in slot %d, not %d", k, Slot(k), m.slot)
			}
		}
		m.migrate(tb, keys)
		return
	}
	for {
		msg := m.src.Do(tb, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.slot), strconv.Itoa(migrateBatch))
		batch, err := msg.AsStrSlice()
		if err != nil {
			tb.Fatalf("redistest: %s: CLUSTER GETKEYSINSLOT %d: %v", m.src.Addr(), m.slot, err)
		}
		if len(batch) == 0 {
			return
		}
		m.migrate(tb, batch)
	}
}

// migrate sends MIGRATE 127.0.0.1 <target port> "" 0 5000 [AUTH pw] KEYS keys... to the source.
func (m *Migration) migrate(tb testing.TB, keys []string) {
	tb.Helper()
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.dst.Port()), "", "0", "5000"}
	if m.c.password != "" {
		args = append(args, "AUTH", m.c.password)
	}
	args = append(args, "KEYS")
	args = append(args, keys...)
	msg := m.src.Do(tb, args...)
	if err := msg.Error(); err != nil {
		tb.Fatalf("redistest: %s: MIGRATE of %d keys of slot %d to %s: %v", m.src.Addr(), len(keys), m.slot, m.dst.Addr(), err)
	}
	// OK, or NOKEY when the source held none of them.
	if r, _ := msg.ToString(); r != "OK" && r != "NOKEY" {
		tb.Fatalf("redistest: %s: MIGRATE: unexpected reply %q", m.src.Addr(), r)
	}
}

// Finish moves the keys left on the source (MoveKeys without keys), assigns the slot to
// the target with CLUSTER SETSLOT slot NODE <target id> on the target, the source and
// then every other live master, and waits until every running node sees the slot on the
// target, no node has it MIGRATING or IMPORTING, and the cluster has settled.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	m.MoveKeys(tb)
	m.finished = true
	c, s := m.c, strconv.Itoa(m.slot)
	dstID := c.ids[m.dst]
	c.mustOK(tb, m.dst, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	c.mustOK(tb, m.src, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	v := c.mustView(tb)
	for _, n := range c.nodes {
		if e := v.byID[c.ids[n]]; n != m.dst && n != m.src && e != nil && e.master && !e.fail && n.Running() {
			c.mustOK(tb, n, "CLUSTER", "SETSLOT", s, "NODE", dstID)
		}
	}
	c.waitSettled(tb, fmt.Sprintf("slot %d to move to %s", m.slot, m.dst.Addr()), func(v *clusterView) error {
		if owner := v.owner(m.slot); owner != dstID {
			return fmt.Errorf("%s sees slot %d on %s", v.from.Addr(), m.slot, c.addrOf(owner))
		}
		if v.open[m.slot] {
			return fmt.Errorf("%s still has slot %d open (migrating or importing)", v.from.Addr(), m.slot)
		}
		return nil
	}, nil)
}

// MigrateSlot moves slot, with all its keys, to the master to: BeginMigration then Finish.
func (c *Cluster) MigrateSlot(tb testing.TB, slot int, to *Server) {
	tb.Helper()
	c.BeginMigration(tb, slot, to).Finish(tb)
}

// Failover makes master's replica take over with CLUSTER FAILOVER (a coordinated manual
// failover, no write is lost) and waits until every running node sees the replica as
// the master of master's slots and master as its replica, and the cluster has settled.
// Redis abandons a manual failover that has not completed in 5 s: if the replica is
// still one 8 s after the command, Failover sends it again. It returns the new master.
func (c *Cluster) Failover(tb testing.TB, master *Server) *Server {
	tb.Helper()
	slots := c.slotsOf(tb, master)
	r := c.ReplicaOf(tb, master)
	rID, mID := c.ids[r], c.ids[master]
	c.mustOK(tb, r, "CLUSTER", "FAILOVER")
	sent := time.Now()
	resend := func() {
		if time.Since(sent) < manualFailoverRetry {
			return
		}
		sent = time.Now()
		if v, err := c.view(tb, r); err == nil && !v.byID[rID].master {
			msg := r.Do(tb, "CLUSTER", "FAILOVER")
			tb.Logf("redistest: %s: CLUSTER FAILOVER sent again after %v: %v", r.Addr(), manualFailoverRetry, msg.Error())
		}
	}
	c.waitSettled(tb, fmt.Sprintf("replica %s to take over from %s", r.Addr(), master.Addr()), func(v *clusterView) error {
		rn, mn := v.byID[rID], v.byID[mID]
		if !rn.master || !slices.Equal(rn.slots, slots) {
			return fmt.Errorf("%s does not see %s as the master of %v yet", v.from.Addr(), r.Addr(), slots)
		}
		if mn.master || mn.masterID != rID {
			return fmt.Errorf("%s does not see %s as a replica of %s yet", v.from.Addr(), master.Addr(), r.Addr())
		}
		return nil
	}, resend)
	return r
}

// WaitReplicated waits, up to d, until master's replica has processed everything master
// had written when WaitReplicated was called (INFO replication: the replica's
// master_repl_offset reaches the master's), and fails tb if it does not. Use it before a
// KillMaster whose writes must survive. A WAIT sent through [Server.Do] is no such
// barrier: WAIT counts the replicas that acknowledged the last write of its own
// connection, and the admin connection wrote nothing, so it returns at once.
func (c *Cluster) WaitReplicated(tb testing.TB, master *Server, d time.Duration) {
	tb.Helper()
	r := c.ReplicaOf(tb, master)
	offset := func(s *Server) int64 {
		msg := s.Do(tb, "INFO", "replication")
		text, _ := msg.ToString()
		n, err := strconv.ParseInt(parseInfo(strings.TrimPrefix(text, "txt:"))["master_repl_offset"], 10, 64)
		if err != nil {
			tb.Fatalf("redistest: %s: INFO replication: no master_repl_offset (%v)", s.Addr(), err)
		}
		return n
	}
	want := offset(master)
	WaitFor(tb, d, fmt.Sprintf("replica %s to reach offset %d of %s", r.Addr(), want, master.Addr()), func() bool {
		return offset(r) >= want
	})
}

// KillMaster kills master with SIGKILL ([Server.Kill]) and waits until its replica has
// been promoted (the other masters must first agree it failed: 3.5 to 4.5 s here, with
// the node timeout of 2 s) and the running nodes agree and report cluster_state:ok. It
// returns the promoted replica. Writes not yet replicated when master died are lost.
func (c *Cluster) KillMaster(tb testing.TB, master *Server) *Server {
	tb.Helper()
	slots := c.slotsOf(tb, master)
	r := c.ReplicaOf(tb, master)
	rID, mID := c.ids[r], c.ids[master]
	master.Kill(tb)
	c.waitSettled(tb, fmt.Sprintf("replica %s to be promoted after %s was killed", r.Addr(), master.Addr()), func(v *clusterView) error {
		if rn := v.byID[rID]; !rn.master || !slices.Equal(rn.slots, slots) {
			return fmt.Errorf("%s does not see %s as the master of %v yet", v.from.Addr(), r.Addr(), slots)
		}
		if !v.byID[mID].fail {
			return fmt.Errorf("%s does not flag %s as failed yet", v.from.Addr(), master.Addr())
		}
		return nil
	}, nil)
	return r
}

// Restart restarts s after a Kill or Stop ([Server.Restart]). It reads its nodes.conf
// and rejoins the cluster; a former master whose replica took over comes back as a
// replica of it, empty unless the cluster was started WithAOF, and syncs. Restart waits
// until every running node sees s as a healthy node and the cluster has settled (with
// all nodes running, that includes every master having a replica in sync).
func (c *Cluster) Restart(tb testing.TB, s *Server) {
	tb.Helper()
	c.mustID(tb, s)
	s.Restart(tb)
	c.waitSettled(tb, fmt.Sprintf("%s to rejoin the cluster", s.Addr()), nil, nil)
}

// --- internals ---

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr  string // addr without the @bus port
	myself    bool
	master    bool
	masterID  string // "" for a master
	fail      bool   // FAIL (agreed on), not PFAIL
	pfail     bool   // "fail?": this node's own suspicion
	handshake bool   // "handshake" or "noaddr"
	connected bool   // link-state "connected"
	slots     [][2]int
	open      []int // myself only: slots MIGRATING or IMPORTING ("[slot->-id]", "[slot-<-id]")
}

// parseClusterNodes parses a CLUSTER NODES reply.
func parseClusterNodes(text string) ([]clusterNode, error) {
	text = strings.TrimPrefix(text, "txt:") // RESP3 verbatim string
	var nodes []clusterNode
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		n := clusterNode{id: f[0], connected: f[7] == "connected"}
		n.addr, _, _ = strings.Cut(f[1], "@")
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "myself":
				n.myself = true
			case "master":
				n.master = true
			case "fail":
				n.fail = true
			case "fail?":
				n.pfail = true
			case "handshake", "noaddr":
				n.handshake = true
			}
		}
		if f[3] != "-" {
			n.masterID = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				slot, _, ok := strings.Cut(strings.TrimPrefix(r, "["), "-")
				k, err := strconv.Atoi(slot)
				if !ok || err != nil {
					return nil, fmt.Errorf("malformed open slot %q in CLUSTER NODES line %q", r, line)
				}
				n.open = append(n.open, k)
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= SlotCount {
				return nil, fmt.Errorf("malformed slot range %q in CLUSTER NODES line %q", r, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		slices.SortFunc(n.slots, func(x, y [2]int) int { return x[0] - y[0] })
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// clusterView is one node's CLUSTER NODES.
type clusterView struct {
	from  *Server
	text  string
	nodes []clusterNode
	byID  map[string]*clusterNode
	open  map[int]bool // slots the node has MIGRATING or IMPORTING
}

// owner returns the ID of the master serving slot in v, or "".
func (v *clusterView) owner(slot int) string {
	for _, n := range v.nodes {
		if !n.master {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return n.id
			}
		}
	}
	return ""
}

// view asks s for CLUSTER NODES.
func (c *Cluster) view(tb testing.TB, s *Server) (*clusterView, error) {
	tb.Helper()
	msg := s.Do(tb, "CLUSTER", "NODES")
	text, err := msg.ToString()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr(), err)
	}
	nodes, err := parseClusterNodes(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Addr(), err)
	}
	v := &clusterView{from: s, text: strings.TrimPrefix(text, "txt:"), nodes: nodes,
		byID: make(map[string]*clusterNode), open: make(map[int]bool)}
	for i := range nodes {
		n := &nodes[i]
		if c.byID[n.id] == nil {
			return nil, fmt.Errorf("%s knows a node %s (%s) that is not ours", s.Addr(), n.id, n.addr)
		}
		v.byID[n.id] = n
		if n.myself {
			for _, k := range n.open {
				v.open[k] = true
			}
		}
	}
	if len(v.byID) != len(c.nodes) {
		return nil, fmt.Errorf("%s knows %d nodes, not %d", s.Addr(), len(v.byID), len(c.nodes))
	}
	return v, nil
}

// liveNode returns the first running node.
func (c *Cluster) liveNode(tb testing.TB) *Server {
	tb.Helper()
	for _, s := range c.nodes {
		if s.Running() {
			return s
		}
	}
	tb.Fatalf("redistest: no cluster node is running")
	return nil
}

// mustView returns the first running node's view, failing tb on an error.
func (c *Cluster) mustView(tb testing.TB) *clusterView {
	tb.Helper()
	v, err := c.view(tb, c.liveNode(tb))
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return v
}

// mustID returns s's node ID, failing tb if s is not a node of c.
func (c *Cluster) mustID(tb testing.TB, s *Server) string {
	tb.Helper()
	id, ok := c.ids[s]
	if !ok {
		tb.Fatalf("redistest: server %v is not a node of this cluster", s)
	}
	return id
}

// addrOf returns the address of the node with ID id, or "no node".
func (c *Cluster) addrOf(id string) string {
	if s := c.byID[id]; s != nil {
		return s.Addr()
	}
	return "no node"
}

// ownerOf returns the master serving slot in the first running node's view.
func (c *Cluster) ownerOf(tb testing.TB, slot int) *Server {
	tb.Helper()
	v := c.mustView(tb)
	id := v.owner(slot)
	if id == "" {
		tb.Fatalf("redistest: %s sees no master for slot %d\n%s", v.from.Addr(), slot, v.text)
	}
	return c.byID[id]
}

// slotsOf returns the slot ranges master serves, failing tb if it is not a live master
// that serves slots.
func (c *Cluster) slotsOf(tb testing.TB, master *Server) [][2]int {
	tb.Helper()
	id := c.mustID(tb, master)
	v := c.mustView(tb)
	n := v.byID[id]
	if !n.master || n.fail || len(n.slots) == 0 || !master.Running() {
		tb.Fatalf("redistest: %s is not a live master serving slots\n%s", master.Addr(), v.text)
	}
	return n.slots
}

// mustOK sends a command that must answer OK.
func (c *Cluster) mustOK(tb testing.TB, s *Server, args ...string) {
	tb.Helper()
	msg := s.Do(tb, args...)
	if err := msg.Error(); err != nil {
		tb.Fatalf("redistest: %s: %q: %v", s.Addr(), args, err)
	}
	if r, _ := msg.ToString(); r != "OK" {
		tb.Fatalf("redistest: %s: %q: unexpected reply %q", s.Addr(), args, r)
	}
}

// settled reports why the cluster has not settled, or nil when every running node
// reports cluster_state:ok, knows every node, sees every running node as healthy
// (no FAIL, PFAIL or handshake flag, link connected), and all running nodes agree on
// every node's role, master and slots; the 16384 slots are served, each by one running
// master; every running replica's link to its master is up; and, when all nodes run,
// every master has a replica. extra, if not nil, is checked on every running node's view.
func (c *Cluster) settled(tb testing.TB, extra func(*clusterView) error) error {
	tb.Helper()
	var ref string
	var refView *clusterView
	all := true
	for _, s := range c.nodes {
		if !s.Running() {
			all = false
			continue
		}
		msg := s.Do(tb, "CLUSTER", "INFO")
		info, err := msg.ToString()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr(), err)
		}
		if st := parseInfo(strings.TrimPrefix(info, "txt:"))["cluster_state"]; st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", s.Addr(), st)
		}
		v, err := c.view(tb, s)
		if err != nil {
			return err
		}
		sum, err := c.summarize(v)
		if err != nil {
			return err
		}
		if refView == nil {
			ref, refView = sum, v
		} else if sum != ref {
			return fmt.Errorf("%s and %s disagree:\n%s--- versus ---\n%s", refView.from.Addr(), s.Addr(), ref, sum)
		}
		if extra != nil {
			if err := extra(v); err != nil {
				return err
			}
		}
		me := v.byID[c.ids[s]]
		if me.master {
			continue
		}
		msg = s.Do(tb, "INFO", "replication")
		text, err := msg.ToString()
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", s.Addr(), err)
		}
		repl := parseInfo(strings.TrimPrefix(text, "txt:"))
		if repl["role"] != "slave" || repl["master_link_status"] != "up" {
			return fmt.Errorf("%s: replica link not up (role:%s master_link_status:%s)", s.Addr(), repl["role"], repl["master_link_status"])
		}
		if want := strconv.Itoa(c.byID[me.masterID].Port()); repl["master_port"] != want {
			return fmt.Errorf("%s: replicates port %s, but CLUSTER NODES says %s", s.Addr(), repl["master_port"], c.addrOf(me.masterID))
		}
	}
	if refView == nil {
		return fmt.Errorf("no node is running")
	}
	if all {
		for _, n := range refView.nodes {
			if !n.master || len(n.slots) == 0 {
				continue
			}
			has := false
			for _, r := range refView.nodes {
				has = has || (!r.master && r.masterID == n.id)
			}
			if !has {
				return fmt.Errorf("master %s has no replica", n.addr)
			}
		}
	}
	return nil
}

// summarize checks one view for the health conditions of settled and returns its
// canonical form (every node's ID, role, master and slots), which all views must share.
func (c *Cluster) summarize(v *clusterView) (string, error) {
	var b strings.Builder
	var covered [SlotCount]bool
	for _, s := range c.nodes {
		id := c.ids[s]
		n := v.byID[id]
		if n.addr != s.Addr() {
			return "", fmt.Errorf("%s sees node %s at %s, not %s", v.from.Addr(), id, n.addr, s.Addr())
		}
		if s.Running() && (n.fail || n.pfail || n.handshake || !(n.myself || n.connected)) {
			return "", fmt.Errorf("%s does not see %s as healthy (fail:%v pfail:%v handshake:%v connected:%v)",
				v.from.Addr(), s.Addr(), n.fail, n.pfail, n.handshake, n.connected)
		}
		role := "master"
		if !n.master {
			role = "replica of " + c.addrOf(n.masterID)
		}
		fmt.Fprintf(&b, "%s %s %v\n", s.Addr(), role, n.slots)
		if !n.master {
			continue
		}
		for _, r := range n.slots {
			if !s.Running() {
				return "", fmt.Errorf("%s sees slots %d-%d on %s, which is down", v.from.Addr(), r[0], r[1], s.Addr())
			}
			for k := r[0]; k <= r[1]; k++ {
				if covered[k] {
					return "", fmt.Errorf("%s sees slot %d on two masters", v.from.Addr(), k)
				}
				covered[k] = true
			}
		}
	}
	for k, ok := range covered {
		if !ok {
			return "", fmt.Errorf("%s sees no master for slot %d", v.from.Addr(), k)
		}
	}
	return b.String(), nil
}

// waitSettled polls settled (with extra) until it holds, and fails tb after
// clusterSettleTimeout with the last reason and every running node's CLUSTER NODES.
// each, if not nil, is called before every poll.
func (c *Cluster) waitSettled(tb testing.TB, what string, extra func(*clusterView) error, each func()) {
	tb.Helper()
	start := time.Now()
	for {
		if each != nil {
			each()
		}
		err := c.settled(tb, extra)
		if err == nil {
			return
		}
		if time.Since(start) > clusterSettleTimeout {
			var b strings.Builder
			for _, s := range c.nodes {
				if !s.Running() {
					fmt.Fprintf(&b, "--- %s: not running\n", s.Addr())
					continue
				}
				msg := s.Do(tb, "CLUSTER", "NODES")
				text, _ := msg.ToString()
				fmt.Fprintf(&b, "--- %s: CLUSTER NODES\n%s", s.Addr(), strings.TrimPrefix(text, "txt:"))
			}
			tb.Fatalf("redistest: timed out after %v waiting for %s: %v\n%s--- redis-cli --cluster create output ---\n%s",
				clusterSettleTimeout, what, err, b.String(), c.createOut)
		}
		time.Sleep(clusterPoll)
	}
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range (32768 if unknown).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
