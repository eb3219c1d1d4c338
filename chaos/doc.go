// Package chaos is relock's fault-injection suite. It has no API: its tests run contenders
// (goroutines, and separate contender processes built from ./internal/contender) against
// real redis-server processes while faults are injected (process pauses, restarts, killed
// connections, latency and partitions through internal/faultproxy, SCRIPT FLUSH, keys
// expired or deleted behind the holder's back), and check every run three ways:
//
//   - a protected resource that refuses stale fencing tokens records every critical section;
//     accepted sections must never overlap, their tokens must rise, and a counter incremented
//     non-atomically under the lock must end exact;
//   - the holds themselves (acquire return to unlock call, or to the loss notice) must never
//     overlap unless one holder had been told it lost the lock;
//   - the history of acquires and releases must be linearizable (porcupine) against a lock
//     model that allows operations whose outcome is unknown.
//
// Run with RELOCK_CHAOS_RESULTS=RESULTS.md to write the table of faults and outcomes.
package chaos
