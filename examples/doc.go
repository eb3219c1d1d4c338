// Package examples holds relock's runnable example programs, one per directory:
//
//	go run ./examples/quickstart   # the basics: Lock, fencing token, TryLock, a shared counter
//	go run ./examples/reentrant    # nested locking of one name down a call chain
//	go run ./examples/watchdog     # long work under a renewed lease, and the loss notice
//	go run ./examples/trylock      # bounded waits and fixed leases
//
// Each runs on an embedded miniredis, or on the Redis at $REDIS_ADDR when it is set. The
// package's test runs every example and checks that it exits cleanly.
package examples
