package lua

// The read-write lock's scripts (rlock.RWMutex). Its lock hash holds a mode field, the write
// holder's id, and per owner a write hold count and a read hold count; beside it a leases
// zset holds the end of every hold's own lease, and a writers zset the claims of waiting
// writers. Their contracts are in the headers of the .lua files.
var (
	// RWAcquire takes or re-enters a read hold or the write hold of a read-write lock, or
	// claims a refused writer's place among the waiting writers (rw_acquire.lua).
	RWAcquire = load("rw_acquire")
	// RWRelease gives back one read or write hold of a read-write lock; it wakes every
	// waiter when the write hold ends or the lock becomes free (rw_release.lua).
	RWRelease = load("rw_release")
	// RWRenewRead extends the leases of many read holds in one call (rw_renew_read.lua).
	RWRenewRead = load("rw_renew_read")
	// RWRenewWrite extends the leases of many write holds in one call (rw_renew_write.lua).
	RWRenewWrite = load("rw_renew_write")
	// RWLeave withdraws a waiting writer's claim (rw_leave.lua).
	RWLeave = load("rw_leave")
	// RWForce frees a read-write lock whoever holds it, in either mode (rw_force.lua).
	RWForce = load("rw_force")
	// RWState reads a read-write lock's live holds (rw_state.lua).
	RWState = load("rw_state")
)
