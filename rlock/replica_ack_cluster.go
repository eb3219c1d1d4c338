package rlock

import (
	"context"

	"github.com/redis/rueidis"
)

// On a Redis Cluster, the WAIT of WithReplicaAck must be answered by the master that applied
// the write it is for. rueidis's cluster client does not ensure that: WAIT has no key, so
// DoMulti sends it to the node of the command before it, and when that command is redirected
// (MOVED: the slot moved and the client's slot map is stale; ASK: the slot is migrating) rueidis
// sends the command again alone, to the node named, and keeps the WAIT's reply from the first
// node, which counted its own replicas for writes that do not include the grant. (rueidis
// v1.0.79 also panics on an ASK for a DoMulti that carries a blocking command such as WAIT:
// askingMulti loses track of its ASKING once the command is marked blocking.)
//
// So on a Cluster the command and its WAIT are sent here: first on a dedicated connection,
// which rueidis binds to the master its slot map names for the command's slot and on which it
// does not follow redirections (a MOVED or an ASK comes back as the reply, and rueidis
// refreshes its slot map); then, for each redirection, together again on one connection to the
// node named (after ASKING for an ASK).

// maxAckRedirects bounds the redirections that one acknowledged command follows: a slot moves
// to one node at a time, so more than a few means that the topology is changing under it.
const maxAckRedirects = 5

// doAckedCluster sends the command that build makes, followed by a WAIT for the replica
// acknowledgements WithReplicaAck asks for, on one connection to the master that serves the
// command's slot, following MOVED and ASK redirections as described above. It returns the
// command's reply and how many replicas acknowledged (0 when the WAIT failed). When the master
// does not have the script (NOSCRIPT), the command that fallback makes is sent instead, if
// fallback is not nil.
//
// When a redirection cannot be followed (a node rueidis does not know yet, or too many of
// them), the command is sent through rueidis's own redirection handling, and acknowledged by
// no replica: a fresh grant is given back and the attempt retried, by when rueidis has
// connected to the node and refreshed its slot map.
func (c *Client) doAckedCluster(ctx context.Context, build, fallback func() rueidis.Completed) (rueidis.RedisResult, int64) {
	dc, release := c.rc.Dedicate()
	res := c.sendAcked(ctx, dc, false, build, fallback)
	release()
	for redirects := 0; ; redirects++ {
		addr, ask, ok := redirection(res[0].Error())
		if !ok {
			acked, _ := res[1].AsInt64()
			return res[0], acked
		}
		if redirects == maxAckRedirects {
			break
		}
		node := c.rc.Nodes()[addr]
		if node == nil {
			break
		}
		nd, release := node.Dedicate()
		res = c.sendAcked(ctx, nd, ask, build, fallback)
		release()
	}
	r := c.rc.Do(ctx, build())
	if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() && fallback != nil {
		r = c.rc.Do(ctx, fallback())
	}
	return r, 0
}

// sendAcked sends the command that build makes and a WAIT on d, with ASKING before them when
// ask is set; on NOSCRIPT it sends the command that fallback makes, if not nil, instead. It
// returns the command's reply and the WAIT's.
func (c *Client) sendAcked(ctx context.Context, d rueidis.DedicatedClient, ask bool, build, fallback func() rueidis.Completed) []rueidis.RedisResult {
	send := func(cmd rueidis.Completed) []rueidis.RedisResult {
		if ask {
			return d.DoMulti(ctx, d.B().Asking().Build(), cmd, c.waitCmd())[1:]
		}
		return d.DoMulti(ctx, cmd, c.waitCmd())
	}
	res := send(build())
	if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() && fallback != nil {
		res = send(fallback())
	}
	return res
}

// redirection returns the node that err, a MOVED or ASK reply, redirects to, and whether it
// is an ASK.
func redirection(err error) (addr string, ask, ok bool) {
	re, isReply := rueidis.IsRedisErr(err)
	if !isReply {
		return "", false, false
	}
	if addr, ok = re.IsMoved(); ok {
		return addr, false, true
	}
	addr, ok = re.IsAsk()
	return addr, ok, ok
}
