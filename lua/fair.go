package lua

// The fair lock's scripts (rlock.FairMutex). Its lock hash has the shape of the plain lock's,
// so it is renewed by [Renew] and freed by [ForceRelease]. Beside it, a queue zset holds the
// waiting owners by arrival and an alive zset holds when each waiter's place expires unless
// the waiter refreshes it. Their contracts are in the headers of the .lua files.
var (
	// FairAcquire takes or re-enters a fair lock, or joins (or refreshes the caller's place
	// in) its queue; a free lock goes to the queue's head only (fair_acquire.lua).
	FairAcquire = load("fair_acquire")
	// FairRelease gives back one hold of a fair lock and, on the last, wakes only the queue's
	// head (fair_release.lua).
	FairRelease = load("fair_release")
	// FairLeave removes a waiter's place from a fair lock's queue and wakes the next head
	// when that may let it in (fair_leave.lua).
	FairLeave = load("fair_leave")
)
