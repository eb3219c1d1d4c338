package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

const clusterSkip = "long: starts a 6-node Redis Cluster (2-4 s, and ~13 s with the failovers); run without -short"

// Measured on the shared 2-core machine (go test -race, the package's tests in parallel,
// so up to four clusters at once): StartCluster 2.1-4.0 s (2.2-3.0 s alone; redis-cli
// --cluster create takes 2.0 s of it, sleeping while the nodes meet, then the replicas
// sync and the gossip spreads in about 0.8 s); a migration of a slot with 5 keys, from
// BeginMigration to the end of Finish's wait for every node to agree, 8-20 ms, and
// MigrateSlot 5-10 ms; a Failover 0.85-1.2 s; a KillMaster 3.6-4.5 s (2 s of node
// timeout, then the FAIL vote and the election); a Restart of the killed master, until
// it is a replica in sync, 0.1-1.0 s. TestClusterFailover takes about 13 s, of which up
// to 5 s are the Client cleanup waiting for rueidis to close the killed master's
// connection.

// Slot needs no server: the CRC16 check value and the hash-tag rules of the Redis
// Cluster specification. TestClusterBasics compares it with CLUSTER KEYSLOT.
func TestSlot(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "": 0, "123456789": 0x31C3} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	same := [][2]string{
		{"{user1000}.following", "{user1000}.followers"},
		{"foo{bar}{zap}", "bar"},     // the first tag only
		{"foo{{bar}}zap", "{bar"},    // from the first '{' to the first '}'
		{"a{b}c", "b"},               // tag in the middle
		{"{x}y", "x"},                // tag at the start
		{"x{}y", "x{}y"},             // empty tag: the whole key
		{"{}", "{}"},                 // likewise
		{"}x{", "}x{"},               // no '}' after the '{'
		{"a{b", "a{b"},               // unclosed
		{"{a}{b}", "a"},              // second tag ignored
		{"foo{}{bar}", "foo{}{bar}"}, // the first '{' has an empty tag: whole key
	}
	for _, p := range same {
		if Slot(p[0]) != Slot(p[1]) {
			t.Errorf("Slot(%q) = %d, Slot(%q) = %d: want equal", p[0], Slot(p[0]), p[1], Slot(p[1]))
		}
	}
}

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	text := "txt:9d4d 127.0.0.1:17004@27004 slave 64e8 0 1796089586000 3 connected\n" +
		"cb20 127.0.0.1:17001@27001 myself,master - 0 1796089585000 1 connected 0-5460 [5->-64e8] [7-<-6615]\n" +
		"64e8 127.0.0.1:17003@27003 master,fail - 0 1796089586977 3 disconnected 10923-16383\n" +
		"6615 127.0.0.1:17002@27002 master,fail? - 0 1796089586073 2 connected 5462-10922 5461\n"
	nodes, err := parseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("got %d nodes", len(nodes))
	}
	r, me, dead, sus := nodes[0], nodes[1], nodes[2], nodes[3]
	if r.master || r.masterID != "64e8" || r.addr != "127.0.0.1:17004" || !r.connected || len(r.slots) != 0 {
		t.Errorf("replica: %+v", r)
	}
	if !me.myself || !me.master || me.masterID != "" || !slices.Equal(me.slots, [][2]int{{0, 5460}}) || !slices.Equal(me.open, []int{5, 7}) {
		t.Errorf("myself: %+v", me)
	}
	if !dead.fail || dead.pfail || dead.connected {
		t.Errorf("failed master: %+v", dead)
	}
	if sus.fail || !sus.pfail || !slices.Equal(sus.slots, [][2]int{{5461, 5461}, {5462, 10922}}) {
		t.Errorf("suspected master: %+v", sus)
	}
	if _, err := parseClusterNodes("a b c\n"); err == nil {
		t.Errorf("short line: no error")
	}
	if _, err := parseClusterNodes("a 1.2.3.4:1@2 master - 0 0 1 connected 9-3\n"); err == nil {
		t.Errorf("bad range: no error")
	}
}

// startCluster starts a cluster and logs how long it took.
func startCluster(t *testing.T) *Cluster {
	t.Helper()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("StartCluster took %v", time.Since(start).Round(time.Millisecond))
	return c
}

// keysOnEveryMaster returns n keys for each master of c, by the slot c reports for them.
func keysOnEveryMaster(t *testing.T, c *Cluster, n int) map[*Server][]string {
	t.Helper()
	byMaster := make(map[*Server][]string)
	masters := c.Masters(t)
	for i := 0; ; i++ {
		full := true
		for _, m := range masters {
			full = full && len(byMaster[m]) >= n
		}
		if full {
			return byMaster
		}
		key := fmt.Sprintf("%s-%d", Name(t), i)
		m := c.MasterOf(t, key)
		byMaster[m] = append(byMaster[m], key)
	}
}

// setGet writes every key through rc and reads it back.
func setGet(t *testing.T, rc rueidis.Client, keys map[*Server][]string, value string) {
	t.Helper()
	for _, ks := range keys {
		for _, k := range ks {
			if err := rc.Do(ctxT(t, 10*time.Second), rc.B().Set().Key(k).Value(value).Build()).Error(); err != nil {
				t.Fatalf("SET %s: %v", k, err)
			}
		}
	}
	expectValues(t, rc, keys, value)
}

// expectValues reads every key through rc.
func expectValues(t *testing.T, rc rueidis.Client, keys map[*Server][]string, value string) {
	t.Helper()
	for _, ks := range keys {
		for _, k := range ks {
			if got, err := rc.Do(ctxT(t, 10*time.Second), rc.B().Get().Key(k).Build()).ToString(); err != nil || got != value {
				t.Fatalf("GET %s = %q, %v; want %q", k, got, err, value)
			}
		}
	}
}

// dbsize returns the number of keys s holds.
func dbsize(t *testing.T, s *Server) int64 {
	t.Helper()
	msg := s.Do(t, "DBSIZE")
	n, err := msg.AsInt64()
	if err != nil {
		t.Fatalf("%s: DBSIZE: %v", s.Addr(), err)
	}
	return n
}

func TestClusterBasics(t *testing.T) {
	if testing.Short() {
		t.Skip(clusterSkip)
	}
	t.Parallel()
	c := startCluster(t)

	if len(c.Nodes()) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("Nodes %d, Addrs %d", len(c.Nodes()), len(c.Addrs()))
	}
	for i, s := range c.Nodes() {
		if c.Addrs()[i] != s.Addr() || c.NodeID(s) == "" {
			t.Errorf("node %d: addr %s / %s, id %q", i, c.Addrs()[i], s.Addr(), c.NodeID(s))
		}
		if _, err := os.Stat(filepath.Join(s.Dir(), "nodes.conf")); err != nil {
			t.Errorf("%s: nodes.conf not in its own dir: %v", s.Addr(), err)
		}
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("Masters = %d servers", len(masters))
	}
	seen := make(map[*Server]bool)
	for _, m := range masters {
		r := c.ReplicaOf(t, m)
		if seen[m] || seen[r] || slices.Contains(masters, r) {
			t.Fatalf("master %s / replica %s: a node plays two parts", m.Addr(), r.Addr())
		}
		seen[m], seen[r] = true, true
		msg := r.Do(t, "ROLE")
		role, _ := msg.ToArray()
		if s, _ := role[0].ToString(); s != "slave" {
			t.Errorf("ReplicaOf(%s) = %s has ROLE %q", m.Addr(), r.Addr(), s)
		}
	}

	rc := c.Client(t)
	keys := keysOnEveryMaster(t, c, 5)
	setGet(t, rc, keys, "v1")
	for m, ks := range keys {
		if got := dbsize(t, m); got != int64(len(ks)) {
			t.Errorf("master %s holds %d keys, want %d", m.Addr(), got, len(ks))
		}
	}

	names := []string{"{}", "a{b}c", "{x}y", "}x{", "x{}y", "{a}{b}", "a{b", "foo", "", "{user1000}.following", Name(t)}
	for i := 0; i < 200; i++ {
		names = append(names, strconv.Itoa(i), fmt.Sprintf("{tag%d}rest", i))
	}
	n := c.Nodes()[0]
	for _, name := range names {
		msg := n.Do(t, "CLUSTER", "KEYSLOT", name)
		want, err := msg.AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", name, err)
		}
		if got := Slot(name); got != int(want) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", name, got, want)
		}
	}
}

func TestClusterMigration(t *testing.T) {
	if testing.Short() {
		t.Skip(clusterSkip)
	}
	t.Parallel()
	c := startCluster(t)
	rc := c.Client(t)
	// A client that reports TRYAGAIN at once: the default one retries it until the
	// context's deadline.
	noRetry := c.Client(t, func(o *rueidis.ClientOption) { o.DisableRetry = true })

	tag := "{" + Name(t) + "}"
	moved, stays := []string{tag + "a", tag + "b"}, []string{tag + "c", tag + "d"}
	all := append(slices.Clone(moved), stays...)
	slot := Slot(tag)
	for _, k := range all {
		if err := rc.Do(ctxT(t, 10*time.Second), rc.B().Set().Key(k).Value(k).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	src := c.MasterOf(t, tag)
	var dst *Server
	for _, m := range c.Masters(t) {
		if m != src {
			dst = m
			break
		}
	}

	start := time.Now()
	m := c.BeginMigration(t, slot, dst)
	if m.Slot() != slot || m.Source() != src || m.Target() != dst {
		t.Fatalf("Migration %d %s->%s", m.Slot(), m.Source().Addr(), m.Target().Addr())
	}
	m.MoveKeys(t, moved...)

	// The keys are split: each one is where it should be, all are read through the
	// client (ASK for the moved ones), and a command on keys of both sides gets TRYAGAIN.
	if got := dbsize(t, dst); got != int64(len(moved)) {
		t.Fatalf("target holds %d keys, want %d", got, len(moved))
	}
	if got := dbsize(t, src); got != int64(len(stays)) {
		t.Fatalf("source holds %d keys, want %d", got, len(stays))
	}
	if c.MasterOf(t, tag) != src {
		t.Fatalf("MasterOf during the migration is not the source")
	}
	asking := dst.CommandStats(t)["asking"]
	for _, k := range all {
		if got, err := rc.Do(ctxT(t, 10*time.Second), rc.B().Get().Key(k).Build()).ToString(); err != nil || got != k {
			t.Fatalf("GET %s during the migration = %q, %v", k, got, err)
		}
	}
	if got := dst.CommandStats(t)["asking"] - asking; got != int64(len(moved)) {
		t.Fatalf("the target got %d ASKING, want one per moved key (%d)", got, len(moved))
	}
	msg := dst.Do(t, "GET", moved[0]) // without ASKING
	if err := msg.Error(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("GET of a moved key on the target without ASKING: %v, want MOVED", err)
	}
	err := noRetry.Do(ctxT(t, 10*time.Second), noRetry.B().Mget().Key(moved[0], stays[0]).Build()).Error()
	if rerr, ok := rueidis.IsRedisErr(err); !ok || !rerr.IsTryAgain() {
		t.Fatalf("MGET across the split keys = %v, want TRYAGAIN", err)
	}
	msg = src.Do(t, "MGET", moved[0], stays[0]) // Redis 7.0 answers so on the source too
	if err := msg.Error(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
		t.Fatalf("MGET across the split keys on the source: %v, want TRYAGAIN", err)
	}
	// A new key of the slot is created on the target (ASK).
	fresh := tag + "new"
	if err := rc.Do(ctxT(t, 10*time.Second), rc.B().Set().Key(fresh).Value(fresh).Build()).Error(); err != nil {
		t.Fatalf("SET %s during the migration: %v", fresh, err)
	}
	if got := dbsize(t, dst); got != int64(len(moved))+1 {
		t.Fatalf("the key created during the migration is not on the target (%d keys there)", got)
	}
	all = append(all, fresh)

	m.Finish(t)
	t.Logf("migration of slot %d (%d keys) took %v", slot, len(all), time.Since(start).Round(time.Millisecond))
	if c.MasterOf(t, tag) != dst {
		t.Fatalf("MasterOf after Finish is not the target")
	}
	if got := dbsize(t, src); got != 0 {
		t.Fatalf("source still holds %d keys", got)
	}
	if got := dbsize(t, dst); got != int64(len(all)) {
		t.Fatalf("target holds %d keys, want %d", got, len(all))
	}
	vals, err := rc.Do(ctxT(t, 10*time.Second), rc.B().Mget().Key(all...).Build()).AsStrSlice()
	if err != nil || !slices.Equal(vals, all) {
		t.Fatalf("MGET after Finish = %q, %v", vals, err)
	}

	// The one-call form, back to the source, with every key.
	start = time.Now()
	c.MigrateSlot(t, slot, src)
	t.Logf("MigrateSlot took %v", time.Since(start).Round(time.Millisecond))
	if c.MasterOf(t, tag) != src || dbsize(t, src) != int64(len(all)) || dbsize(t, dst) != 0 {
		t.Fatalf("after MigrateSlot back: master %s, %d keys on the source, %d on the target",
			c.MasterOf(t, tag).Addr(), dbsize(t, src), dbsize(t, dst))
	}
	vals, err = rc.Do(ctxT(t, 10*time.Second), rc.B().Mget().Key(all...).Build()).AsStrSlice()
	if err != nil || !slices.Equal(vals, all) {
		t.Fatalf("MGET after MigrateSlot = %q, %v", vals, err)
	}
}

// waitReplicated waits until every replica has processed everything its master has
// written so far (INFO replication master_repl_offset).
func waitReplicated(t *testing.T, c *Cluster) {
	t.Helper()
	offset := func(s *Server) int64 {
		msg := s.Do(t, "INFO", "replication")
		text, _ := msg.ToString()
		n, _ := strconv.ParseInt(parseInfo(strings.TrimPrefix(text, "txt:"))["master_repl_offset"], 10, 64)
		return n
	}
	for _, m := range c.Masters(t) {
		want, r := offset(m), c.ReplicaOf(t, m)
		WaitFor(t, 20*time.Second, r.Addr()+" to catch up", func() bool { return offset(r) >= want })
	}
}

func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip(clusterSkip)
	}
	t.Parallel()
	c := startCluster(t)
	rc := c.Client(t)
	keys := keysOnEveryMaster(t, c, 3)
	setGet(t, rc, keys, "v1")

	// A coordinated failover loses nothing.
	old := c.Masters(t)[0]
	start := time.Now()
	promoted := c.Failover(t, old)
	t.Logf("Failover took %v", time.Since(start).Round(time.Millisecond))
	masters := c.Masters(t)
	if !slices.Contains(masters, promoted) || slices.Contains(masters, old) || len(masters) != 3 {
		t.Fatalf("after Failover: masters %v", c.Addrs())
	}
	if c.ReplicaOf(t, promoted) != old {
		t.Fatalf("the old master is not the replica of the new one")
	}
	expectValues(t, rc, keys, "v1")
	setGet(t, rc, keys, "v2")

	// A killed master's replica takes over once the others agree it failed.
	waitReplicated(t, c)
	victim := c.Masters(t)[1]
	start = time.Now()
	heir := c.KillMaster(t, victim)
	t.Logf("KillMaster took %v", time.Since(start).Round(time.Millisecond))
	if victim.Running() || slices.Contains(c.Masters(t), victim) || !slices.Contains(c.Masters(t), heir) {
		t.Fatalf("after KillMaster: victim running %v, masters %v", victim.Running(), c.Masters(t))
	}
	expectValues(t, rc, keys, "v2")
	setGet(t, rc, keys, "v3")

	// It comes back as the replica of its heir and syncs.
	start = time.Now()
	c.Restart(t, victim)
	t.Logf("Restart took %v", time.Since(start).Round(time.Millisecond))
	if c.ReplicaOf(t, heir) != victim {
		t.Fatalf("the restarted node is not the replica of its heir")
	}
	if got, want := dbsize(t, victim), dbsize(t, heir); got != want {
		t.Fatalf("the restarted replica holds %d keys, its master %d", got, want)
	}
	setGet(t, rc, keys, "v4")
}

// WithPassword reaches redis-cli (REDISCLI_AUTH), the replicas (--masterauth), MIGRATE
// (AUTH) and Client.
func TestClusterPassword(t *testing.T) {
	if testing.Short() {
		t.Skip(clusterSkip)
	}
	t.Parallel()
	c := StartCluster(t, WithPassword("cluster-secret"))
	rc := c.Client(t)
	keys := keysOnEveryMaster(t, c, 2)
	setGet(t, rc, keys, "v1")
	var key string
	var from *Server
	for m, ks := range keys {
		key, from = ks[0], m
		break
	}
	to := c.Masters(t)[0]
	if to == from {
		to = c.Masters(t)[1]
	}
	c.MigrateSlot(t, Slot(key), to)
	if c.MasterOf(t, key) != to {
		t.Fatalf("MasterOf after MigrateSlot is not the target")
	}
	msg := to.Do(t, "EXISTS", key)
	if n, err := msg.AsInt64(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s on the target = %d, %v", key, n, err)
	}
	expectValues(t, rc, keys, "v1")
}
