package rlock

// Hooks for the hardening regression tests (hardening_test.go, issue 9).

// HoldEntries is the number of entries in c's table of holds (held, or with an operation in
// flight).
func HoldEntries(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.holds)
}

// WatchMessages registers a probe waiter at the back of the line on m's release channel
// (which must be live) and returns a function that reports whether a message has reached c's
// subscription on that channel since the call. A message wakes the longest-waiting waiter,
// so the probe is woken only when every waiter ahead of it already holds a wake-up. stop
// unregisters the probe.
func WatchMessages(c *Client, m *Mutex) (seen func() bool, stop func(), err error) {
	mark := c.sub.Mark(m.keys.channel)
	w, err := c.sub.Watch(m.keys.channel)
	if err != nil {
		return nil, nil, err
	}
	return func() bool { return !w.Live(mark) }, w.Close, nil
}
