package lua

// The count-down latch's scripts (rlock.CountDownLatch). A latch is a string key holding its
// count; each mutating request also writes a short-lived record of its reply at a key of its
// own (passed in KEYS), so that a replay under the same request id is answered, not applied
// again.
var (
	// LatchSet creates a latch with a count, only if none exists (latch_set.lua).
	LatchSet = load("latch_set")
	// LatchCountDown counts a latch down by one, deleting it and waking every waiter at zero
	// (latch_count_down.lua).
	LatchCountDown = load("latch_count_down")
	// LatchDelete deletes a latch and wakes every waiter (latch_delete.lua).
	LatchDelete = load("latch_delete")
)
