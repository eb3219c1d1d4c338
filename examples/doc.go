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
//	go run ./examples/httplock     # HTTP middleware: one request per resource, 423 Locked
//
// Each runs on an embedded miniredis, or on a real Redis named by $REDIS_URL
// (redis://user:pass@host:port/db, rediss:// for TLS; it wins when both are set) or
// $REDIS_ADDR (host:port). Each main.go makes its relock Clients with rlock.Dial, as a
// program of yours would with one line:
//
//	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//
// The package's test runs every example and checks that it exits cleanly; httplock also has
// tests of its own (its middleware, with httptest).
//
// The OpenTelemetry module (otel/, a module of its own) has its example beside it: a
// periodic job with one runner across replicas, exporting its metrics to stdout:
//
//	cd otel && go run ./examples/leader
package examples
