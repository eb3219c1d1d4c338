// Package examples holds relock's runnable example programs, one per directory:
//
//	go run ./examples/quickstart   # the basics: Lock, fencing token, TryLock, a shared counter
//	go run ./examples/reentrant    # nested locking of one name down a call chain
//	go run ./examples/watchdog     # long work under a renewed lease, and the loss notice
//	go run ./examples/trylock      # bounded waits and fixed leases
//	go run ./examples/fairlock     # FairMutex: waiters served in arrival order
//	go run ./examples/rwlock       # RWMutex: many readers or one writer
//	go run ./examples/semaphore    # Semaphore: counted permits
//	go run ./examples/permits      # PermitSemaphore: permits with leases that come back
//	go run ./examples/latch        # CountDownLatch: wait until n events happened
//	go run ./examples/multilock    # MultiLock: several locks, all or nothing
//	go run ./examples/spinlock     # SpinMutex: the lock without pub/sub
//
// Each runs on an embedded miniredis, or on the Redis at $REDIS_ADDR when it is set. The
// package's test runs every example and checks that it exits cleanly.
package examples
