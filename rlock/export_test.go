package rlock

import "strings"

// Hooks for the external tests (package rlock_test) to wait for internal events instead of
// sleeping.

// ParkedCandidates is the number of waiters of c parked on m's lock, ready for a direct
// hand-off.
func ParkedCandidates(c *Client, m *Mutex) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.handoffs[m.keys.lock+m.v.holdSuffix]
	if q == nil {
		return 0
	}
	n := 0
	for _, cand := range q.cands {
		if cand.state.Load() == candParked {
			n++
		}
	}
	return n
}

// ChannelLive reports whether c's subscription to m's release channel is confirmed.
func ChannelLive(c *Client, m *Mutex) bool { return c.sub.Live(m.keys.channel) }

// RedHolds is the number of entries of the package's table of RedLock holds for the locks
// whose name starts with prefix (every owner, every set of Clients).
func RedHolds(prefix string) int {
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	n := 0
	for k := range redHolds.m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
